"""timerwheel, the package a user imports: the gRPC client and the public protos.

    import timerwheel
    with timerwheel.Client("127.0.0.1:7070") as client:
        client.send("orders", b"hello", delay_ms=90_000)

The protos are `timerwheel.v1` (generated; regenerate with `python -m server.protogen`).
"""

from timerwheel.client import RemoteError, TimerClient

Client = TimerClient

__all__ = ["Client", "RemoteError", "TimerClient"]
