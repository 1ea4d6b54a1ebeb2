"""The instructions of each step of a message's life, each step counted on its own.

    python -m bench.step_costs --messages 10000
    python -m bench.step_costs --messages 10000 --step fire --step "retention sweep"

Runs the steps of docs/performance.md's table ("The life of one message") over
`--messages` timers of one topic, 100-byte bodies, in the order a message meets them:
the SendBatch's decode and its SendSpecs (the gRPC worker's part), the engine's send
(ids, records, staging, the group commit with its fsync), the cascade of a minute-wheel
copy of them down to the second wheel, the fire, the fetch of the fired records, the
DeliveryBatches built and serialised, the Ack (decode and engine), and the retention
sweep. Each step is counted in a valgrind run of its own (all at once, side by side),
which runs every step but counts that one alone: callgrind's collection is switched on
where it starts and off where it ends, as `bench.instructions` does for the burst's
measured part (a run that dumps the count after each step lost dumps: callgrind takes a
request when it next looks, and a later one replaces it). Prints one JSON line, the
instructions a message of each step.

The engine runs in virtual time, as `bench.engine_virtual`'s benches do, with real
RocksDB: no gRPC server, no processes, so the steps a message makes between processes
(`--workers`) are not in it (`python -m bench.ipc_bench` measures a hop).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from bench.instructions import UNDER_CALLGRIND, collect, count_in
from timerwheel.engine.engine import Engine
from timerwheel.server.send_requests import specs_from_proto
from timerwheel.server.service import delivery_batch
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import Settings

COUNTED = "TIMERWHEEL_STEP_COSTS"  # the step a run counts, set by `main`
# In the order `steps` runs them; in parentheses, what runs between steps, not counted.
STEPS = (
    "setup",
    "grpc decode (SendBatch)",
    "validation, SendSpec",
    "engine send: id, record, stage, commit, fsync",
    "(a minute-wheel copy sent, 29 s of idle ticks)",
    "fire",
    "fetch fired records",
    "delivery batch build and serialise",
    "(ack requests made)",
    "grpc decode (Ack)",
    "engine ack: read, patch, stage, commit, fsync",
    "cascade minute to second (with 25 s of ticks)",
    "(the copy fired)",
    "retention sweep",
)


def steps(messages: int, data_dir: str, ended: Callable[[str], None] | None = None) -> list[str]:
    """Run each step once, counting the one named by COUNTED alone (callgrind's
    collection switched on where it starts and off where it ends: `collect`, which
    waits until callgrind has switched), and telling `ended` each step's end. Returns
    the steps' names."""
    names: list[str] = []
    counted = os.environ.get(COUNTED)
    if counted == STEPS[0]:
        collect(True)

    def done(name: str) -> None:
        assert name == STEPS[len(names)], (name, STEPS[len(names)])
        names.append(name)
        if ended:
            ended(name)
        if name == counted:
            collect(False)
        elif len(names) < len(STEPS) and STEPS[len(names)] == counted:
            collect(True)

    clock = VirtualClock()
    engine = Engine(Settings(data_dir=data_dir), clock, background=False)
    body, batch_size = b"x" * 100, 1_000
    wire = [
        pb.SendBatchRequest(messages=[
            pb.SendRequest(topic="t", body=body, delay_ms=30_000) for _ in range(batch_size)
        ]).SerializeToString()
        for _ in range(messages // batch_size)
    ]  # fmt: skip
    far = pb.SendBatchRequest(messages=[  # placed in the minute wheel, cascaded at 51 s
        pb.SendRequest(topic="c", body=body, delay_ms=100_000) for _ in range(batch_size)
    ]).SerializeToString()  # fmt: skip
    done("setup")
    requests = [pb.SendBatchRequest.FromString(raw) for raw in wire]
    done("grpc decode (SendBatch)")
    specs = [specs_from_proto(request.messages) for request in requests]
    done("validation, SendSpec")
    for batch in specs:
        engine.send_batch(batch)
    done("engine send: id, record, stage, commit, fsync")
    for _ in range(messages // batch_size):
        engine.send_batch(specs_from_proto(pb.SendBatchRequest.FromString(far).messages))
    advance(engine, clock, 29)
    done("(a minute-wheel copy sent, 29 s of idle ticks)")
    advance(engine, clock, 1)
    done("fire")
    fired = engine.fetch_deliveries("t", 0, messages)
    done("fetch fired records")
    size = engine.settings.delivery_batch_max
    rows = [(f.seq, f.message_id, f.record, 1) for f in fired]
    for first in range(0, len(rows), size):
        delivery_batch(rows[first : first + size]).SerializeToString()
    done("delivery batch build and serialise")
    ids = [f.message_id for f in fired]
    acks = [
        pb.AckRequest(topic="t", message_ids=ids[first : first + size]).SerializeToString()
        for first in range(0, len(ids), size)
    ]
    done("(ack requests made)")
    decoded = [pb.AckRequest.FromString(raw) for raw in acks]
    done("grpc decode (Ack)")
    acked = sum(len(engine.ack(request.topic, list(request.message_ids))) for request in decoded)
    done("engine ack: read, patch, stage, commit, fsync")
    advance(engine, clock, 25)
    done("cascade minute to second (with 25 s of ticks)")
    advance(engine, clock, 60)
    clock.advance(engine.settings.retention_ms)
    done("(the copy fired)")
    engine.run_until_idle()
    done("retention sweep")
    if (
        len(fired) != messages
        or acked != messages
        or engine.store.scan("minute", b"", b"\xff" * 9, 1)
    ):
        raise RuntimeError(f"{len(fired)} fired, {acked} acked of {messages}; or some not cascaded")
    engine.close()
    return names


def advance(engine: Engine, clock: VirtualClock, seconds: int) -> None:
    """Virtual time on by `seconds`, a writer's work after each second."""
    for _ in range(seconds):
        clock.advance(1_000)
        engine.run_until_idle()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_costs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument(
        "--step", action="append", choices=[s for s in STEPS[1:] if not s.startswith("(")],
        help="count only these steps (default: each)",
    )  # fmt: skip
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        with tempfile.TemporaryDirectory(prefix="timerwheel-steps-") as data_dir:
            print(json.dumps(steps(args.messages, data_dir)))
        return
    chosen = args.step or [s for s in STEPS[1:] if not s.startswith("(")]
    # One run a step, side by side: a step counted alone, from where it starts to where it
    # ends, by the switch `bench.instructions` uses (`collect`).
    with tempfile.TemporaryDirectory(prefix="timerwheel-callgrind-") as scratch:
        runs = {
            step: subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                 f"--callgrind-out-file={os.path.join(scratch, f'{index}.out')}",
                 sys.executable, "-m", "bench.step_costs", "--inside",
                 "--messages", str(args.messages)],
                env={**os.environ, UNDER_CALLGRIND: "1", COUNTED: step, "PYTHONHASHSEED": "0"},
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            for index, step in enumerate(chosen)
        }  # fmt: skip
        per_message = {}
        for step, run in runs.items():
            _, stderr = run.communicate(timeout=3_600)
            if run.returncode != 0:
                sys.exit(f"bench.step_costs: {step}: {stderr[-2000:]}")
            per_message[step] = round(count_in(stderr) / args.messages)
    print(json.dumps({"messages": args.messages, "instructions_per_message": per_message}))


if __name__ == "__main__":
    main()
