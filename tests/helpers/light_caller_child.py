"""A well-behaved caller in a process of its own: `python light_caller_child.py TARGET TOKEN`.

For each line `TAG` read from stdin it sends a small message with id TAG and gets it back,
one call after the other, then prints `SEND_CODE GET_CODE MILLISECONDS` for the pair. Its
own process, so that what it measures is the server's answer and not the wait for the GIL
of a test process whose other threads are busy building and reading attack requests.
"""

from __future__ import annotations

import sys
import time

import grpc

from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

TIMEOUT_S = 60.0


def code_of(call, request, metadata) -> str:
    try:
        call(request, metadata=metadata, timeout=TIMEOUT_S)
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def main(target: str, token: str) -> None:
    channel = grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])
    service = pb_grpc.TimerServiceStub(channel)
    metadata = (("authorization", f"Bearer {token}"),)
    for line in sys.stdin:
        tag = line.strip()
        began = time.perf_counter()
        send = pb.SendRequest(topic="small", body=b"ping", delay_ms=3_600_000, message_id=tag)
        sent = code_of(service.Send, send, metadata)
        got = code_of(service.Get, pb.GetRequest(message_id=tag), metadata)
        print(sent, got, f"{(time.perf_counter() - began) * 1000:.3f}", flush=True)
    channel.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
