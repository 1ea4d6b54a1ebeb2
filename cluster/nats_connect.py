"""A node's connection to NATS: its credentials and TLS, and a first connect that fails
at once, with a message naming the flag, when a server refuses them (docs/cluster.md,
"NATS credentials and TLS").

nats-py retries a first connect for ever when reconnecting is on (as a node needs it for
the outages it lives through), so a refused password would look like a hang: here the
connection's error callback watches the first connect and ends it on a refusal (an
authorization violation or a TLS failure), which no retry can fix. A server that does
not answer is still waited for (the node bounds that wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import nats
import structlog

if TYPE_CHECKING:
    from timerwheel.cluster.settings import NodeSettings

log = structlog.get_logger("timerwheel.cluster")


class NatsRefused(Exception):
    """A NATS server refused this node's credentials or TLS at its first connect: the node
    does not start (retrying cannot help; a server merely away is waited for instead)."""


def redacted(url: str) -> str:
    """`url` with any user, password or token left out (for messages and logs)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def refusal(error: BaseException) -> bool:
    """A first-connect error no retry can fix: credentials refused, or TLS failed."""
    if isinstance(error, (ssl.SSLError, nats.errors.AuthorizationError)):
        return True
    text = str(error).lower()
    return "authorization violation" in text or "authentication" in text


async def connect(urls: list[str], name: str, node: NodeSettings | None = None) -> nats.NATS:
    """A connection that reconnects for ever (a NATS server restarting or a network cut is
    a state the node lives through, not an error that ends it), with the node's NATS
    credentials and TLS (`NodeSettings.nats_*`). Raises NatsRefused at once when a server
    refuses them; a server that does not answer is retried (the caller bounds the wait)."""
    options: dict[str, Any] = {}
    if node is not None:
        tls = node.nats_tls()
        if tls is not None:
            options["tls"] = tls
        if node.nats_creds_file is not None:
            options["user_credentials"] = node.nats_creds_file
    loop = asyncio.get_running_loop()
    refused: asyncio.Future[Any] = loop.create_future()
    connected = False

    async def on_error(error: Exception) -> None:
        if connected:
            log.warning("cluster_nats_error", error=repr(error))
        elif refusal(error) and not refused.done():
            refused.set_result(error)

    client = nats.NATS()
    options.update(
        servers=urls, name=name, connect_timeout=2, reconnect_time_wait=0.25,
        max_reconnect_attempts=-1, allow_reconnect=True, ping_interval=2,
        max_outstanding_pings=3, error_cb=on_error,
    )  # fmt: skip
    attempt: asyncio.Future[Any] = asyncio.ensure_future(client.connect(**options))
    try:
        await asyncio.wait([attempt, refused], return_when=asyncio.FIRST_COMPLETED)
        if not attempt.done():
            raise NatsRefused(_refused_message(urls, refused.result(), node))
        attempt.result()
        connected = True
        # nats-py goes plain when the server does not ask for TLS: refuse that
        plain = not client._server_info.get("tls_required")
        if node is not None and node.nats_tls_wanted and plain:
            url = client.connected_url
            raise NatsRefused(
                f"NATS at {redacted(url.geturl()) if url else ', '.join(map(redacted, urls))} "
                "does not use TLS, but --nats-ca or --nats-cert was given: enable TLS on the "
                "servers"
            )
    except BaseException:
        attempt.cancel()
        with contextlib.suppress(BaseException):
            await attempt
        with contextlib.suppress(Exception):
            await client.close()
        raise
    return client


def _refused_message(urls: list[str], error: BaseException, node: NodeSettings | None) -> str:
    where = ", ".join(redacted(url) for url in urls)
    if isinstance(error, ssl.SSLError):
        given = f"--nats-ca {node.nats_ca_file!r}" if node and node.nats_ca_file else "no --nats-ca"
        return (
            f"NATS at {where}: TLS failed ({error}); with {given}: give the CA of the "
            "servers' certificates (--nats-ca), and --nats-cert/--nats-key if they require "
            "a client certificate"
        )
    creds = f"--nats-creds {node.nats_creds_file!r}" if node and node.nats_creds_file else None
    return (
        f"NATS at {where} refused this node's credentials ({error}); it used "
        f"{creds or 'no --nats-creds'} and {'a' if _has_userinfo(urls) else 'no'} "
        "user:password or token in the URL"
    )


def _has_userinfo(urls: list[str]) -> bool:
    return any("@" in urlsplit(url).netloc for url in urls)
