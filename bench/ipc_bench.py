"""What crossing between the server's processes costs, per call and per message (not a test).

    python -m bench.ipc_bench

Measures, with a real unix socket between two processes (a CallServer in a child process):
an empty call's round trip; a SendBatch of 100 prepared sends (`SendOp`, pickled as the
worker sends it) for the sender and the receiver, and the engine's answer to it; 500
fired rows as the engine hands them to the delivery process; the records' decode that
the delivery and worker processes then do; and a delivered batch's trace events (2,000
ids) as the delivery process notes and pickles them and the engine unpickles and stages
them (timerwheel.engine.trace_ops). Prints one JSON line; docs/architecture.md cites it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import tempfile
import time

from timerwheel.common import State
from timerwheel.delivery.trace import DeliveryTrace
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.engine.trace_ops import TraceOp
from timerwheel.procs.ipc import CallClient, CallServer
from timerwheel.store import records
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.domain import SendSpec, Timer, When, WhenKind
from timerwheel.wheels.settings import Settings

KEY = b"b" * 32
TRACE_BATCH = 2_000  # ids a delivered batch carries at most (`delivery_batch_max`)


class _TraceGroups:
    """The engine's `record_trace` as the delivery process sees it: keeps the groups."""

    def __init__(self) -> None:
        self.groups: list = []

    def record_trace(self, groups: list) -> bool:
        self.groups = groups
        return True


def _serve(path: str, ready) -> None:
    server = CallServer(path, KEY, lambda method, args, context: args[0], "bench")
    ready.send(True)
    ready.recv()  # until the parent is done
    server.close()


def _per(seconds: float, count: int) -> float:
    return round(seconds / count * 1e6, 2)


def _timed(function, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        function()
    return time.perf_counter() - started


def main() -> None:
    context = multiprocessing.get_context("spawn")
    socket_dir = tempfile.mkdtemp(prefix="tw-ipc-bench-")
    path = os.path.join(socket_dir, "s.sock")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(path, child))
    process.start()
    parent.recv()
    client = CallClient(path, KEY, "bench")
    try:
        figures = _measure(client)
    finally:
        parent.send(True)
        process.join(10)
        client.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
    print(json.dumps(figures))


def _measure(client: CallClient) -> dict:
    settings = Settings()
    now_ms = int(time.time() * 1000)
    specs = [
        SendSpec(f"topic-{i % 4}", b"x" * 100, When(WhenKind.DELAY, 5_000 + i)) for i in range(100)
    ]
    op = prepare_sends(specs, now_ms, settings, MessageIds())
    wire = pickle.dumps(op, protocol=5)
    timer = Timer("A" * 32, "topic-1", b"x" * 100, {}, now_ms, now_ms, State.FIRED,
                  When(WhenKind.DELAY, 5_000), now_ms, 0, 0, 1)  # fmt: skip
    record = records.encode_timer(timer)
    rows = [(seq, timer.message_id.encode(), record) for seq in range(500)]
    results = op.results_as_prepared()
    answer = pickle.dumps((True, op.packed_results(results)), protocol=5)

    def engine_answers() -> bytes:
        return pickle.dumps((True, op.packed_results(op.results_as_prepared())))

    trace_ids, engine = MessageIds().take([now_ms] * TRACE_BATCH), _TraceGroups()
    trace = DeliveryTrace(engine)

    def delivery_notes_trace() -> bytes:  # the lists as a dispatcher hands them over
        trace.delivered(list(trace_ids), [1] * TRACE_BATCH, "subscriber-1")
        trace.flush()
        return pickle.dumps(TraceOp(groups=engine.groups), protocol=5)

    trace_wire = delivery_notes_trace()

    repeat = 2_000
    return {
        "empty_call_round_trip_us": _per(_timed(lambda: client.call("x", None), repeat), repeat),
        "send_batch_100_round_trip_us": _per(_timed(lambda: client.call("x", op), 500), 500),
        "send_op_pickle_us_per_message": _per(_timed(lambda: pickle.dumps(op), 500), 500 * 100),
        "send_op_unpickle_us_per_message": _per(_timed(lambda: pickle.loads(wire), 500), 500 * 100),
        # The engine's answer to that op: its results as they cross back (none for
        # server-made ids: SendOp.packed_results), then made whole in the worker; and
        # the results pickled whole, as for an op with a client's ids.
        "send_answer_engine_us_per_message": _per(_timed(engine_answers, 500), 500 * 100),
        "send_answer_worker_us_per_message": _per(
            _timed(lambda: op.unpacked_results(pickle.loads(answer)[1]), 500), 500 * 100
        ),
        "send_results_whole_engine_us_per_message": _per(
            _timed(lambda: pickle.dumps((True, op.results_as_prepared())), 500), 500 * 100
        ),
        "fired_rows_500_round_trip_us": _per(_timed(lambda: client.call("x", rows), 500), 500),
        "record_decode_us": _per(
            _timed(lambda: records.decode_timer(timer.message_id, record), 100_000), 100_000
        ),
        "trace_delivery_us_per_message": _per(_timed(delivery_notes_trace, 500), 500 * TRACE_BATCH),
        "trace_engine_us_per_message": _per(
            _timed(lambda: pickle.loads(trace_wire).apply(None, StagedBatch(), now_ms), 500),
            500 * TRACE_BATCH,
        ),
        "load_average": os.getloadavg(),
    }


if __name__ == "__main__":
    main()
