"""timerwheel, the package a user imports: the gRPC client and the public protos.

    import timerwheel
    with timerwheel.Client("127.0.0.1:7070") as client:
        client.send("orders", b"hello", delay_ms=90_000)
    # a secured server: timerwheel.Client(target, tls=timerwheel.Tls(ca_file="ca.pem"), token=...)

The protos are `timerwheel.v1` (generated; regenerate with `python -m server.protogen`).
"""

from timerwheel.client import RemoteError, TimerClient
from timerwheel.credentials import Connection, Tls

Client = TimerClient

__all__ = ["Client", "Connection", "RemoteError", "TimerClient", "Tls"]
