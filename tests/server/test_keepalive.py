"""HTTP/2 keepalive (timerwheel.server.keepalive, docs/security.md "Half-open connections"):
a peer that stops answering is dropped within keepalive_time_ms + keepalive_timeout_ms;
a peer that answers the pings is kept; timerwheel's client pings within the server's
policy and is never sent away with GOAWAY too_many_pings, while a client pinging faster
than the policy is (the control that shows the test can see it).

Real gRPC on loopback, port 0. The server's intervals are scaled down (1 s, not the
defaults' 10 s) and the client's ping interval with them, in the shipped ratio.
"""

from __future__ import annotations

import socket
import struct
import time

import grpc
import pytest
from helpers.streams import Collector

from timerwheel import client as client_module
from timerwheel import types
from timerwheel.client import TimerClient
from timerwheel.wheels.settings import Settings

pytestmark = pytest.mark.system  # seconds of idle connections, timed

KEEPALIVE = {"keepalive_time_ms": 1_000, "keepalive_timeout_ms": 1_000}
DROP_BOUND_S = (1_000 + 1_000) / 1000 + 3  # the sum, and slack for a loaded machine
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING = 4, 6
ACK = 1


def frame(kind: int, flags: int, payload: bytes = b"", stream: int = 0) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


class RawPeer:
    """A TCP client that speaks just enough HTTP/2 to open a connection (preface, SETTINGS
    and its ACK), then either answers the server's pings or stays silent."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0))
        self.buffer = b""
        self.pings = 0

    def next_frame(self, timeout_s: float) -> tuple[int, int, bytes] | None:
        """The next frame, or None when the server closed the connection."""
        self.sock.settimeout(timeout_s)
        while len(self.buffer) < 9 or len(self.buffer) < 9 + int.from_bytes(self.buffer[:3]):
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.buffer += data
        length = int.from_bytes(self.buffer[:3])
        kind, flags = self.buffer[3], self.buffer[4]
        payload = self.buffer[9 : 9 + length]
        self.buffer = self.buffer[9 + length :]
        return kind, flags, payload

    def open(self) -> None:
        """Until the server's SETTINGS, which it acknowledges."""
        while True:
            got = self.next_frame(5)
            assert got is not None, "the server closed the connection during its set-up"
            kind, flags, _ = got
            if kind == SETTINGS and not flags & ACK:
                self.sock.sendall(frame(SETTINGS, ACK))
                return

    def run_until_closed(self, answer: bool, limit_s: float) -> float | None:
        """Read (answering pings when `answer`) until the server closes the connection:
        the seconds that took, or None if it was still open after `limit_s`."""
        started = time.monotonic()
        while (left := limit_s - (time.monotonic() - started)) > 0:
            try:
                got = self.next_frame(left)
            except TimeoutError:
                return None
            if got is None:
                return time.monotonic() - started
            kind, flags, payload = got
            if kind == PING and not flags & ACK:
                self.pings += 1
                if answer:
                    self.sock.sendall(frame(PING, ACK, payload))
        return None

    def close(self) -> None:
        self.sock.close()


def test_a_peer_that_stops_answering_is_dropped_within_the_bound(make_server):
    server = make_server(**KEEPALIVE)
    silent = RawPeer(server.port)
    try:
        silent.open()
        closed_after_s = silent.run_until_closed(answer=False, limit_s=DROP_BOUND_S)
    finally:
        silent.close()
    assert closed_after_s is not None, f"a silent peer was still connected after {DROP_BOUND_S} s"
    assert silent.pings >= 1  # dropped for the unanswered ping, not for anything else
    print(f"\nsilent peer dropped after {closed_after_s:.2f} s (bound {DROP_BOUND_S:g} s)")


def test_a_peer_that_answers_the_pings_is_kept(make_server):
    server = make_server(**KEEPALIVE)
    healthy = RawPeer(server.port)
    try:
        healthy.open()
        closed_after_s = healthy.run_until_closed(answer=True, limit_s=2 * DROP_BOUND_S)
    finally:
        healthy.close()
    assert closed_after_s is None, f"an answering peer was dropped after {closed_after_s:.2f} s"
    assert healthy.pings >= 3  # pinged all along, and kept


def client_options(client_ping_ms: int) -> list:
    """The client's channel options as shipped, but for its ping interval."""
    options = dict(types.CHANNEL_OPTIONS)
    options["grpc.keepalive_time_ms"] = client_ping_ms
    return [*options.items()]


# The shipped ratio, scaled from seconds to milliseconds: the client pings every
# KEEPALIVE_TIME_MS (30 s) and the server allows one every keepalive_min_ping_interval_ms
# (10 s by default); here 3 s against 1 s. The control pings every second (grpcio's
# client pings no more often, whatever it is asked) against a policy of 4 s.
SHIPPED_RATIO = types.KEEPALIVE_TIME_MS / Settings().keepalive_min_ping_interval_ms


@pytest.mark.parametrize(
    ("server_min_ms", "client_ping_ms", "kept"),
    [(1_000, int(1_000 * SHIPPED_RATIO), True), (4_000, 1_000, False)],
)
def test_the_clients_pings_keep_within_the_servers_policy(
    make_server, collectors, monkeypatch, server_min_ms, client_ping_ms, kept
):
    assert SHIPPED_RATIO >= 2  # the shipped client is well inside the default policy
    server = make_server(keepalive_min_ping_interval_ms=server_min_ms, **KEEPALIVE)
    monkeypatch.setattr(client_module, "CHANNEL_OPTIONS", client_options(client_ping_ms))
    with TimerClient(server.target, timeout_s=10) as client:
        collector = Collector(client, "idle")
        collectors.append(collector)
        # Four of the client's pings (three early ones are what ends a connection); a
        # connection to be ended is waited for longer, since a loaded machine delays the
        # pings, and the wait ends the moment it is.
        ended = collector.ended.wait(4 * client_ping_ms / 1000 + (2 if kept else 30))
        if not kept:
            assert ended, "a client pinging 4x too often was never sent away"
            assert getattr(collector.error, "code", None) is grpc.StatusCode.UNAVAILABLE
            return
        assert not ended, f"the idle Subscribe stream ended: {collector.error}"
        sent = client.send("idle", b"after an idle spell", delay_ms=0)
        assert [d.message_id for d in collector.wait_count(1)] == [sent.message_id]
