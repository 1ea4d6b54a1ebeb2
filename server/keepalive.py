"""HTTP/2 keepalive on the server: a peer that stops answering is dropped within a bound.

A connection whose peer went away without a FIN or RST (its machine lost power, a NAT or
firewall forgot the flow, a process stopped) looks open to the server until TCP gives
up, which on Linux takes from half a minute (a pending write's retransmissions) to
hours (an idle socket, no write): meanwhile it holds its Subscribe stream's thread and
its place in `max_subscribers`, its in-flight messages and its slot of the per-token
limits. With these options the server pings every connection (calls or none) after
`keepalive_time_ms` without hearing from it, and closes it when the ping's ACK does not
come within `keepalive_timeout_ms`: a silent peer is gone within their sum (15 s by
default; docs/security.md, "Half-open connections"). The ping is 17 bytes a connection.

The policy for the clients' own pings: one without data at most every
`keepalive_min_ping_interval_ms` (10 s by default), more often is a strike, and a third
strike ends the connection with GOAWAY "too_many_pings". timerwheel's client pings every
30 s (`timerwheel.types.KEEPALIVE_OPTIONS`), well inside it. A connection without a
call for `max_connection_idle_ms` (5 min) is closed with a graceful GOAWAY; a client's
next call opens a new one.
"""

from __future__ import annotations

from timerwheel.wheels.settings import Settings

PING_STRIKES = 2  # gRPC's default: the third early ping ends the connection


def keepalive_options(settings: Settings) -> list[tuple[str, int]]:
    """grpc.server options for the keepalive and ping policy above."""
    return [
        ("grpc.keepalive_time_ms", settings.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", settings.keepalive_timeout_ms),
        # What this grpcio's transport waits for a ping's ACK by: without it, one minute
        # whatever keepalive_timeout_ms says (a silent peer was held 60 s, not 2).
        ("grpc.http2.ping_timeout_ms", settings.keepalive_timeout_ms),
        # Ping idle connections too: a half-open one without calls would be kept forever.
        ("grpc.keepalive_permit_without_calls", 1),
        # gRPC stops pinging after 2 pings without data by default: the keepalive would
        # go quiet on a connection that is only idle, and miss it going half-open later.
        ("grpc.http2.max_pings_without_data", 0),
        # Clients' pings: accepted this often, calls or none (else gRPC allows one every
        # 2 hours on a connection without calls, and closes a client pinging more).
        ("grpc.http2.min_ping_interval_without_data_ms", settings.keepalive_min_ping_interval_ms),
        ("grpc.http2.max_ping_strikes", PING_STRIKES),
        ("grpc.max_connection_idle_ms", settings.max_connection_idle_ms),
    ]
