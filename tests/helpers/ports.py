"""A loopback port left as a killed server leaves it: its connections waiting out
TIME_WAIT, which refuses a plain bind (no SO_REUSEADDR) for a minute."""

from __future__ import annotations

import socket
import time


def idle_connection(port: int, greeted: bool = False) -> socket.socket:
    """A raw TCP connection to `port` that sends nothing: when the server's side closes
    (its process killed), it has nothing unread, so it sends FIN rather than RST.

    With `greeted`, returns once the server has written its first bytes (a gRPC server's
    HTTP/2 SETTINGS): it has accepted the connection. One still in the listen backlog
    when the process dies is reset instead, and leaves no TIME_WAIT."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    if greeted:
        assert connection.recv(65536), f"port {port} closed the connection unasked"
    return connection


def close_after_the_server(connection: socket.socket) -> None:
    """Read to the server's FIN, then close: the server's side, which closed first, waits
    in TIME_WAIT. Reading everything first matters: closing with unread bytes sends RST."""
    with connection:
        while connection.recv(65536):
            pass


def wait_until_plain_bind_refused(port: int, bound_s: float) -> None:
    """Returns once a bind without SO_REUSEADDR to `port` fails (the TIME_WAIT is there)."""
    deadline = time.monotonic() + bound_s
    while True:
        with socket.socket() as plain:
            try:
                plain.bind(("127.0.0.1", port))
            except OSError:
                return
        assert time.monotonic() < deadline, f"port {port}: no TIME_WAIT within {bound_s} s"
        time.sleep(0.01)
