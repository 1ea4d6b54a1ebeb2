"""The instructions of each step of a message's life, each step counted on its own.

    python -m bench.step_costs --messages 10000

Runs the steps of docs/performance.md's table ("The life of one message") over
`--messages` timers of one topic, 100-byte bodies, in the order a message meets them:
the SendBatch's decode and its SendSpecs (the gRPC worker's part), the engine's send
(ids, records, staging, the group commit with its fsync), the cascade of a minute-wheel
copy of them down to the second wheel, the fire, the fetch of the fired records, the
DeliveryBatches built and serialised, the Ack (decode and engine), and the retention
sweep. Under valgrind (`bench.instructions` does the same for the whole burst) callgrind
is dumped after each step, so each count is that step's alone; it prints one JSON line,
instructions a message for each step. Run natively it prints nothing useful: the count
needs callgrind.

The engine runs in virtual time, as `bench.engine_virtual`'s benches do, with real
RocksDB: no gRPC server, no processes, so the steps a message makes between processes
(`--workers`) are not in it (`python -m bench.ipc_bench` measures a hop).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timerwheel.engine.engine import Engine
from timerwheel.server.service import delivery_batch, specs_from_proto
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import Settings

DUMPING = "TIMERWHEEL_STEP_COSTS"  # set to callgrind's output file by `main`
_TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)
_STEP = re.compile(r"^desc: Trigger: dump (.*)$", re.MULTILINE)
_dumps = 0


def dump(step: str) -> None:
    """Callgrind: write what was counted since the last dump, then count from zero.

    callgrind_control returns once it has asked; callgrind takes a request when it next
    looks, and a second request before then replaces the first. So this waits for the
    dump's file before the next step runs (a bench, not a test: nothing else to wait on)."""
    global _dumps
    out = os.environ.get(DUMPING)
    if not out:
        return
    subprocess.run(["callgrind_control", "-d", step, str(os.getpid())],
                   capture_output=True, check=True, timeout=60)  # fmt: skip
    _dumps += 1
    deadline = time.monotonic() + 600
    while not os.path.exists(f"{out}.{_dumps}") and time.monotonic() < deadline:
        time.sleep(0.05)


def steps(messages: int, data_dir: str) -> list[str]:
    """Run each step once; returns their names in the order they were dumped."""
    names: list[str] = []

    def done(name: str) -> None:
        dump(name)
        names.append(name)

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
    done("(a minute-wheel copy sent, 29 s of idle ticks: not a step)")
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
    done("(ack requests made: not a step)")
    decoded = [pb.AckRequest.FromString(raw) for raw in acks]
    done("grpc decode (Ack)")
    acked = sum(len(engine.ack(request.topic, list(request.message_ids))) for request in decoded)
    done("engine ack: read, patch, stage, commit, fsync")
    advance(engine, clock, 25)
    done("cascade minute to second (with 25 s of ticks)")
    advance(engine, clock, 60)
    clock.advance(engine.settings.retention_ms)
    done("(the copy fired: not a step)")
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
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        with tempfile.TemporaryDirectory(prefix="timerwheel-steps-") as data_dir:
            print(json.dumps(steps(args.messages, data_dir)))
        return
    with tempfile.TemporaryDirectory(prefix="timerwheel-callgrind-") as scratch:
        out = os.path.join(scratch, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, "-m", "bench.step_costs", "--inside",
             "--messages", str(args.messages)],
            env={**os.environ, DUMPING: out, "PYTHONHASHSEED": "0"},
            capture_output=True, text=True, timeout=3_600,
        )  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"bench.step_costs: {done.stderr[-2000:]}")
        per_message = {}
        for path in glob.glob(out + ".*"):
            text = Path(path).read_text()
            step, count = _STEP.search(text), _TOTALS.search(text)
            if step and count and step.group(1) != "setup":
                per_message[step.group(1)] = round(int(count.group(1)) / args.messages)
    print(json.dumps({"messages": args.messages, "instructions_per_message": per_message}))


if __name__ == "__main__":
    main()
