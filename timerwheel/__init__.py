"""timerwheel, the package a user imports: the gRPC clients and the public protos.

    import timerwheel
    with timerwheel.Client("127.0.0.1:7070") as client:
        client.send("orders", b"hello", delay_ms="90s")

- `timerwheel.Client`: the synchronous client (timerwheel/client.py), with
  `client.producer()` (batching single sends from many threads) and `client.consume()`.
- `timerwheel.AsyncClient`: the same calls for asyncio (grpc.aio; timerwheel/aio.py).
- `timerwheel.AckSender`: a topic's acks sent in batches from a thread, for a consumer
  loop of your own over `client.subscribe()` (timerwheel/acks.py).
- `timerwheel.State`, `timerwheel.SendResult`, `timerwheel.TimerInfo`, `timerwheel.Message`:
  what the calls return; `timerwheel.RemoteError`: what they raise.
- `timerwheel.Tls`, `timerwheel.Connection`: how to reach a secured server, e.g.
  `timerwheel.Client(target, tls=timerwheel.Tls(ca_file="ca.pem"), token=...)`.
- `connections=N` (both clients): the calls take turns on N TCP connections, so one
  client is served by several workers of a `serve --workers` server (timerwheel/connections.py).
- `timerwheel.v1`: the generated protos (regenerate with `python -m server.protogen`).
"""

from timerwheel.acks import AckSender
from timerwheel.aio import AsyncClient
from timerwheel.client import Client, TimerClient
from timerwheel.consumer import Message
from timerwheel.credentials import Connection, Tls
from timerwheel.producer import AsyncProducer, Producer
from timerwheel.types import RemoteError, TimerInfo
from wheels.domain import SendResult, State

__all__ = [
    "AckSender",
    "AsyncClient",
    "AsyncProducer",
    "Client",
    "Connection",
    "Message",
    "Producer",
    "RemoteError",
    "SendResult",
    "State",
    "TimerClient",
    "TimerInfo",
    "Tls",
]
