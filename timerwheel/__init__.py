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
- `timerwheel.v1`: the generated protos (regenerate with `python -m timerwheel.server.protogen`).

The package is also the namespace of the server's rooms (`timerwheel.engine`,
`timerwheel.store`, ...; docs/architecture.md), which import `timerwheel.common` and
`timerwheel.durations` from here. So the client's names are loaded when first used, from
the fixed table below: a server process, a Spark worker or a pure unit test that imports
`timerwheel.wheels` does not load grpc and the protos through this file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from timerwheel.acks import AckSender
    from timerwheel.aio import AsyncClient
    from timerwheel.aio_producer import AsyncProducer
    from timerwheel.client import Client, TimerClient
    from timerwheel.common import SendResult, State
    from timerwheel.consumer import Message
    from timerwheel.credentials import Connection, Tls
    from timerwheel.producer import Producer
    from timerwheel.types import RemoteError, TimerInfo

_HOMES = {  # public name -> the module that defines it
    "AckSender": "timerwheel.acks",
    "AsyncClient": "timerwheel.aio",
    "AsyncProducer": "timerwheel.aio_producer",
    "Client": "timerwheel.client",
    "Connection": "timerwheel.credentials",
    "Message": "timerwheel.consumer",
    "Producer": "timerwheel.producer",
    "RemoteError": "timerwheel.types",
    "SendResult": "timerwheel.common",
    "State": "timerwheel.common",
    "TimerClient": "timerwheel.client",
    "TimerInfo": "timerwheel.types",
    "Tls": "timerwheel.credentials",
}


def __getattr__(name: str) -> object:
    if name == "v1":  # the generated protos, a subpackage
        return importlib.import_module("timerwheel.v1")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'timerwheel' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES, "v1"])


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
