"""Calls between the service's processes: pickled requests over unix sockets.

Built on `multiprocessing.connection` (stdlib): length-framed messages, an HMAC handshake
with a per-start random key (only the processes `timerwheel serve` started can connect),
and pickling in C. Measured per-call costs are in docs/architecture.md.

* `CallServer` answers calls on a unix socket with one thread per connection: the thread
  blocks in `recv` (the GIL released), runs the call and sends the answer. Threads of a
  host process do little per call (unpickle, hand the work to the writer or a read), so
  they hold the GIL briefly and never for a whole request's protobuf work.
* `CallClient` lends each call a connection of its own (idle ones are reused, new ones
  made as concurrent calls need them), so concurrent callers never share a socket and
  need no multiplexing. A call is `(method, args)`; the answer is `(True, value)` or
  `(False, error)`.
* Errors cross as values: a `TimerwheelError` raised by the callee is raised again, same
  type, same message, in the caller (`pack_error`); anything else becomes a `RemoteFailure`.
  A peer that is gone (restarting, killed) raises `PeerUnavailable`, a `ShuttingDown`, so
  a client of the service sees UNAVAILABLE and retries.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import structlog

from timerwheel.common import TimerwheelError
from timerwheel.wheels.domain import ShuttingDown

log = structlog.get_logger("timerwheel.ipc")

Handler = Callable[[str, tuple, "CallContext"], object]
PackedError = tuple[type[Exception], tuple, dict]  # an exception as it crosses: see pack_error


class PeerUnavailable(ShuttingDown):
    """The process on the other end is not there (starting, restarting or gone)."""


class RemoteFailure(Exception):
    """The callee failed with an error that is not a domain error: a bug, reported as one."""


class CallContext:
    """What a handler knows about the connection a call came on; `on_close` callbacks run
    when that connection ends (the caller's thread or process is gone)."""

    def __init__(self) -> None:
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, callback: Callable[[], None]) -> None:
        self._on_close.append(callback)

    def closed(self) -> None:
        for callback in self._on_close:
            try:
                callback()
            except Exception:
                log.exception("ipc_close_callback_failed")


class CallServer:
    """Serves `handler(method, args, context)` on the unix socket `path`."""

    def __init__(self, path: str, authkey: bytes, handler: Handler, name: str) -> None:
        # A process that was killed leaves its socket file behind; its successor takes the
        # path over (the directory is the supervisor's own, mode 0700).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._listener = Listener(path, family="AF_UNIX", authkey=authkey, backlog=128)
        os.chmod(path, 0o600)
        self._handler = handler
        self._name = name
        self._closed = False
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):  # closed, or a bad handshake
                if self._closed:
                    return
                continue
            with self._lock:
                self._connections.add(connection)
            threading.Thread(
                target=self._serve, args=(connection,), name=f"{self._name}-conn", daemon=True
            ).start()

    def _serve(self, connection: Connection) -> None:
        context = CallContext()
        try:
            while True:
                try:
                    method, args = connection.recv()
                except (EOFError, OSError):
                    return
                try:
                    answer = (True, self._handler(method, args, context))
                except TimerwheelError as exc:
                    answer = (False, pack_error(exc))
                except Exception as exc:
                    log.exception("ipc_call_failed", method=method)
                    answer = (False, pack_error(RemoteFailure(f"{method}: {exc!r}")))
                try:
                    connection.send(answer)
                except (OSError, ValueError):
                    return
        finally:
            with self._lock:
                self._connections.discard(connection)
            connection.close()
            context.closed()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            # shutdown wakes a thread blocked in recv; close alone would not.
            with contextlib.suppress(OSError):
                socket.socket(fileno=os.dup(connection.fileno())).shutdown(socket.SHUT_RDWR)


class CallClient:
    """Calls a `CallServer` from any number of threads.

    A call takes an idle connection (the most recently used first) or makes one, and
    gives it back when answered: the number of connections, and of serving threads in
    the peer, follows the calls in progress, not the threads that ever called.
    """

    def __init__(self, path: str, authkey: bytes, peer: str) -> None:
        self._path = path
        self._authkey = authkey
        self._peer = peer
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def call(self, method: str, *args: object) -> Any:
        return self.begin(method, *args).result()

    def begin(self, method: str, *args: object) -> PendingCall:
        """Send a call and return at once; its answer is read by `result()`. The caller
        does other work meanwhile (a Subscribe stream sends one batch while the delivery
        process picks the next: `RemoteHub.batches`)."""
        connection = self._take()
        try:
            connection.send((method, args))
        except (EOFError, OSError) as exc:
            self._drop(connection)
            raise PeerUnavailable(f"the {self._peer} process is not available ({exc!r})") from exc
        return PendingCall(self, connection)

    def _answered(self, connection: Connection) -> None:
        with self._lock:
            if self._closed:
                connection.close()
            else:
                self._idle.append(connection)

    def _take(self) -> Connection:
        while True:
            with self._lock:
                if self._closed:
                    raise PeerUnavailable(f"the {self._peer} connection is closed")
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect()
            # Calls are strictly request/answer, so an idle connection with something to
            # read has been closed by the peer (it restarted): make a new one rather than
            # fail a call that was never sent.
            if not _readable(connection):
                return connection
            self._drop(connection)

    def _connect(self) -> Connection:
        try:
            connection = Client(self._path, family="AF_UNIX", authkey=self._authkey)
        except (OSError, EOFError, AuthenticationError) as exc:
            raise PeerUnavailable(f"the {self._peer} process is not available ({exc!r})") from exc
        with self._lock:
            self._all.add(connection)
        return connection

    def _drop(self, connection: Connection) -> None:
        with self._lock:
            self._all.discard(connection)
        connection.close()

    def close(self) -> None:
        """Close every connection (a thread blocked in a call sees the peer gone)."""
        with self._lock:
            self._closed = True
            connections, self._all, self._idle = list(self._all), set(), []
        for connection in connections:
            with contextlib.suppress(OSError):
                socket.socket(fileno=os.dup(connection.fileno())).shutdown(socket.SHUT_RDWR)


class PendingCall:
    """A call sent and not yet answered; its connection is lent to it until `result()`.

    `result()` must be called once (the answer is on the connection, and a connection
    holding an unread answer cannot carry another call)."""

    def __init__(self, client: CallClient, connection: Connection) -> None:
        self._client = client
        self._connection = connection

    def result(self) -> Any:  # what the peer sent, unpickled: its caller gives the type
        try:
            ok, value = self._connection.recv()
        except (EOFError, OSError) as exc:
            self._client._drop(self._connection)
            peer = self._client._peer
            raise PeerUnavailable(f"the {peer} process is not available ({exc!r})") from exc
        self._client._answered(self._connection)
        if ok:
            return value
        raise unpack_error(value)


def _readable(connection: Connection) -> bool:
    try:
        return connection.poll(0)
    except (OSError, EOFError):
        return True


def pack_error(exc: Exception) -> PackedError:
    """An exception as (type, args, attributes): domain errors have constructors of their
    own (InvalidArgument takes field, value, reason), so they are rebuilt without them."""
    return type(exc), exc.args, dict(getattr(exc, "__dict__", {}))


def unpack_error(packed: PackedError) -> Exception:
    error_type, args, attributes = packed
    error = error_type.__new__(error_type)
    Exception.__init__(error, *args)
    error.__dict__.update(attributes)
    return error
