"""What the RPC layer's Python costs a message, outside gRPC itself (not a test).

    python -m bench.rpc_bench

Each figure is the work one thread does for one message, on the thread that holds the
GIL while it does it (in one process, the same GIL as the writer's): turning a decoded
SendBatch of 100 into SendSpecs, validating them, choosing ids and encoding records, the
SendBatchResponse; checking an Ack's 1,000 ids; building and serialising a DeliveryBatch
of 100. Prints one JSON line; docs/lab-log.md cites it.
"""

from __future__ import annotations

import json
import os
import time

from timerwheel.common import SendResult
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.server.send_requests import specs_from_proto
from timerwheel.server.service import delivery_batch, send_batch_response
from timerwheel.store import records
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import validate_message_refs

BATCH = 100
ACK_IDS = 1_000


def _us_per(function, repeat: int, per_call: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        function()
    return round((time.perf_counter() - started) / repeat / per_call * 1e6, 2)


def main() -> None:
    settings, ids = Settings(), MessageIds()
    now_ms = int(time.time() * 1000)
    request = pb.SendBatchRequest(
        messages=[
            pb.SendRequest(topic="orders", body=b"x" * 128, deliver_at_ms=now_ms + 5_000 + i)
            for i in range(BATCH)
        ]
    )
    messages = pb.SendBatchRequest.FromString(request.SerializeToString()).messages
    specs = specs_from_proto(messages)
    op = prepare_sends(specs, now_ms, settings, ids)
    results = [SendResult(i, t) for i, t in zip(op.message_ids, op.deliver_times_ms, strict=True)]
    fired = [
        records.as_fired(record, now_ms, seq) for seq, record in enumerate(op.records, start=1)
    ]
    batch = [  # rows, as a stream takes them (timerwheel.delivery.subscriber.DeliveryRow)
        (seq, message_id, record, 1)
        for seq, (message_id, record) in enumerate(zip(op.message_ids, fired, strict=True))
    ]
    ack_ids = ids.take([now_ms] * ACK_IDS)
    repeat = 3_000
    figures = {
        "send_batch_to_specs_us": _us_per(lambda: specs_from_proto(messages), repeat, BATCH),
        "prepare_sends_us": _us_per(
            lambda: prepare_sends(specs, now_ms, settings, ids), repeat, BATCH
        ),
        "send_batch_response_us": _us_per(lambda: send_batch_response(results), repeat, BATCH),
        "ack_ids_checked_us": _us_per(lambda: validate_message_refs(ack_ids), 300, ACK_IDS),
        "delivery_batch_serialised_us": _us_per(
            lambda: delivery_batch(batch).SerializeToString(), repeat, BATCH
        ),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
