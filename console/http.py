"""The console's HTTP server: uvicorn on a thread of the server process, on a socket bound
here so that a busy port fails at start with a plain message and port 0 is known at once.

`serve --console-port` starts one in the process that owns the gRPC port: the server
itself, or the supervisor under `--workers N` (which serves no RPC itself, so the console's
calls reach the workers through the shared port like any client's).
"""

from __future__ import annotations

import errno
import socket
import threading

import structlog
import uvicorn

from timerwheel.console.app import ApiBackend, build_app
from timerwheel.wheels.clock import Clock

log = structlog.get_logger("timerwheel.console")

STOP_S = 5.0


def api_target(host: str, port: int) -> str:
    """HOST:PORT the console dials: the server's own address, loopback for a wildcard."""
    if host in ("0.0.0.0", ""):
        return f"127.0.0.1:{port}"
    if host in ("::", "[::]"):
        return f"[::1]:{port}"
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


class ConsoleEndpoint:
    """The web console on `host:port` (0: a free port; `port` is then the bound one),
    calling the gRPC API at `target`."""

    def __init__(self, host: str, port: int, target: str, clock: Clock) -> None:
        self._socket = _bind(host, port)
        self.port = self._socket.getsockname()[1]
        self._backend = ApiBackend(target, clock)
        config = uvicorn.Config(
            build_app(self._backend, host), log_config=None, access_log=False,
            lifespan="off", loop="asyncio", http="h11", timeout_graceful_shutdown=2,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        # Connections wait in the listen backlog until uvicorn accepts them: no start race.
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="console",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        log.info("console_serving", host=host, port=self.port, api=target)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=STOP_S)
        self._socket.close()
        self._backend.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = errno.errorcode.get(exc.errno or 0, "error")
        raise OSError(
            f"cannot serve the console on {host}:{port} ({reason}); stop what listens there "
            "or give another --console-port (0 picks a free one)"
        ) from exc
    return sock
