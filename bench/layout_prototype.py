"""Today's per-message layout against a batch-level one, on the burst's shape (decision 0014).

    python -m bench.layout_prototype both --timers 10000 --count
    python -m bench.layout_prototype batch --timers 1000

Fills N timers due in one second (send calls of 10,000, one group commit each), then in
virtual time fires in 4 ms ticks (a fire chunk a tick), fetches what fired (at most
`--in-flight`) and acks it in calls of at most 10,000 ids, as `bench.engine_bench burst`
does; then moves past the retention period and sweeps. Real RocksDB with store/rocks.py's
options, no engine, no gRPC: the layouts themselves are in `bench.layout_permessage`
and `bench.layout_batch`.

Prints one JSON line a layout: entries written and read a timer for each phase, and
whether every timer was delivered exactly once and swept. With `--count` each layout runs
under valgrind's callgrind (as `bench.instructions`), and each phase's instructions a
timer are added: `burst` (fire, fetch, ack) is the part `bench.instructions burst` counts;
`send` and `sweep` are counted the same way, apart.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.instructions import HASH_SEED, TIMEOUT_S, UNDER_CALLGRIND, collect
from bench.layout_batch import Batch
from bench.layout_permessage import PerMessage

LAYOUTS = {"per-message": PerMessage, "batch": Batch}
ACK_CALL = 10_000  # ids an Ack call, as the loadtest's consumer
TICK_MS = 4
TOPIC = "burst"
_TOTALS = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)


def _phase_done(name: str) -> None:
    """Under callgrind: write the instructions counted since the last phase to a dump."""
    if os.environ.get(UNDER_CALLGRIND) != "1":
        return
    subprocess.run(
        ["callgrind_control", f"--dump={name}", str(os.getpid())],
        capture_output=True,
        check=True,
        timeout=60,
    )


def run(layout: str, args, data_dir: str) -> dict:
    rng = random.Random(7)
    store = LAYOUTS[layout](
        data_dir,
        random.Random(11),
        args.retention_s * 1000,
        args.fire_chunk,
        not args.no_sync,
        args.segment_max,
    )
    now = 1_780_000_000_000
    opens = now + 40_000 - (now + 40_000) % 1000
    body = b"x" * args.body
    calls = [
        [opens + rng.randrange(1000) for _ in range(min(args.send_call, args.timers - start))]
        for start in range(0, args.timers, args.send_call)
    ]
    entries: dict[str, dict[str, float]] = {}

    def phase(name: str) -> None:
        _phase_done(name)
        entries[name] = {
            "written": store.store.written / args.timers,
            "read": store.store.read / args.timers,
        }
        store.store.written = store.store.read = 0

    collect(True)
    sent: list[bytes] = []
    for due in calls:
        sent.extend(store.send(TOPIC, [body] * len(due), due, now))
    phase("send")
    now = opens
    delivered: list[bytes] = []
    after_seq, acked, ticks = -1, 0, 0
    while acked < args.timers:
        now += TICK_MS
        ticks += 1
        store.fire(now)
        batch = store.fetch(TOPIC, after_seq, args.in_flight)
        ids = [mid for _, mid, _ in batch]
        delivered.extend(ids)
        for first in range(0, len(ids), ACK_CALL):
            acked += store.ack(TOPIC, ids[first : first + ACK_CALL], now)
        if batch:
            after_seq = batch[-1][0]
        if ticks > 100_000:
            raise RuntimeError(f"{layout}: {acked} of {args.timers} acked after {ticks} ticks")
    phase("burst")
    reacked = None
    if args.check:  # acked ids again, and an id with a forged random part: none counts
        forged = [mid[:-1] + (b"1" if mid.endswith(b"0") else b"0") for mid in delivered[:5]]
        reacked = store.ack(TOPIC, delivered[:5] + forged, now)
    now += args.retention_s * 1000 + 1000
    swept = 0
    while done := store.sweep(now, 10_000):
        swept += done
    phase("sweep")
    collect(False)
    store.close()
    return {
        "layout": layout,
        "timers": args.timers,
        "ticks": ticks,
        "segment_max": args.segment_max if layout == "batch" else None,
        "delivered_once": len(delivered) == len(set(delivered)) == args.timers
        and set(delivered) == set(sent),
        "swept": swept,
        "reacked": reacked,
        "entries_a_timer": {
            name: {k: round(v, 4) for k, v in figures.items()} for name, figures in entries.items()
        },
    }


def _counted(layout: str, argv: list[str]) -> dict:
    """This bench for one layout under callgrind: its figures and each phase's count."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="timerwheel-layout-") as scratch:
        out = os.path.join(scratch, "callgrind.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "bench.layout_prototype",
            layout,
            *argv,
        ]
        done = subprocess.run(
            command,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env={**os.environ, UNDER_CALLGRIND: "1", "PYTHONHASHSEED": HASH_SEED},
        )
        if done.returncode != 0:
            raise RuntimeError(f"{layout} failed under valgrind:\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        dumps = sorted(glob.glob(out + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
        counts = [int(_TOTALS.search(Path(p).read_text()).group(1)) for p in dumps[:3]]
    result["instructions_a_timer"] = {
        name: round(count / result["timers"])
        for name, count in zip(("send", "burst", "sweep"), counts, strict=False)
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("layout", choices=[*LAYOUTS, "both"])
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--body", type=int, default=100, help="body bytes a timer")
    parser.add_argument("--in-flight", type=int, default=20_000, help="the consumer's window")
    parser.add_argument("--fire-chunk", type=int, default=10_000)
    parser.add_argument(
        "--send-call",
        type=int,
        default=10_000,
        help="timers a send call (a group commit), as bench.engine_virtual.burst",
    )
    parser.add_argument("--retention-s", type=int, default=3 * 86_400)
    parser.add_argument("--no-sync", action="store_true")
    parser.add_argument(
        "--segment-max",
        type=int,
        default=1024,
        help="batch: sends a segment at most (a Get reads one segment)",
    )
    parser.add_argument("--count", action="store_true", help="instructions, under callgrind")
    parser.add_argument("--check", action="store_true", help="ack acked and forged ids again")
    args = parser.parse_args()
    layouts = list(LAYOUTS) if args.layout == "both" else [args.layout]
    passed = [a for a in sys.argv[2:] if a != "--count"]
    for layout in layouts:
        if args.count:
            print(json.dumps(_counted(layout, passed)), flush=True)
            continue
        data_dir = tempfile.mkdtemp(prefix="timerwheel-layout-")
        try:
            print(json.dumps(run(layout, args, data_dir)), flush=True)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
