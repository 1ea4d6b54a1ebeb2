"""Instructions an engine bench's measured part executes: a figure the machine's speed
does not move.

    python -m bench.instructions burst --timers 50000
    python -m bench.instructions steady --rate 14000 --max-delay-s 60 --warmup-s 60 --measure-s 5

Runs `python -m bench.engine_bench` with the arguments given under valgrind's callgrind
(`apt-get install valgrind`), which counts the instructions executed instead of timing
them, and prints the bench's JSON line with `instructions` (the count) and
`instructions_per_timer` (burst) or `instructions_per_message` (steady) added.

Why a count: the machines this project is measured on differ in speed from hour to hour
by a third or more (docs/lab-log.md, "The hour matters"), so an engine change worth a
few percent cannot be told from the noise by CPU seconds; the count is the same from run
to run to about a thousandth for the same code, interpreter and arguments, whatever else
the machine runs (two runs side by side, or beside CI, agree that closely). Compare
counts of one interpreter: the count says nothing of cache misses or of time spent
waiting, which is why it is beside the CPU figures, not instead of them.

Only the measured part is counted: callgrind starts with collection off
(`--instr-atstart=no`); the bench calls `collect(True)` where its CPU clock starts and
`collect(False)` where it stops, which ask callgrind to switch (`callgrind_control -i`).
What RocksDB's own threads execute in that span (flushes, compactions) is counted too,
as it is real work of the engine. Outside such a run `collect` does nothing. The bench
runs with PYTHONHASHSEED=0, so string hashes do not change from run to run (other seeds
moved `burst --timers 10000` by no more than runs of one seed differ: one cause fewer);
what still moves the count is the message ids' random part (their order within a
millisecond) and when RocksDB's threads run, a few hundredths of a percent between runs.
`python -m bench.ceiling` checks one shape's count against a committed ceiling.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Set in the bench's environment by `run`: the bench is under callgrind, waiting for `collect`.
UNDER_CALLGRIND = "TIMERWHEEL_BENCH_CALLGRIND"
_COLLECTED = re.compile(r"Collected : (\d+)")
_PER_UNIT = {"burst": ("timers", "instructions_per_timer"),
             "steady": ("messages_acked", "instructions_per_message")}  # fmt: skip
# Under valgrind a bench runs tens of times slower than natively (`burst --timers 50000`
# takes minutes). The bound is for runs left hanging.
TIMEOUT_S = 3_600
# str hashes, and with them the order of sets and the probes of dicts, change from process
# to process by default: one seed for every counted run, whatever the caller's environment.
HASH_SEED = "0"


def collect(on: bool) -> None:
    """Switch callgrind's counting on or off for this process, when `run` started it
    under callgrind; else nothing. Blocks until callgrind has switched."""
    if os.environ.get(UNDER_CALLGRIND) != "1":
        return
    switch = "--instr=on" if on else "--instr=off"
    done = subprocess.run(
        ["callgrind_control", switch, str(os.getpid())], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    if done.returncode != 0 or "Error" in done.stdout:  # it exits 0 when it finds no run
        raise RuntimeError(f"callgrind_control {switch}: {done.stdout}{done.stderr}".strip())


def command(bench_args: list[str], out_file: str) -> list[str]:
    """valgrind running the engine bench with counting off until it asks (`collect`)."""
    return [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_file}",
        sys.executable, "-m", "bench.engine_bench", *bench_args,
    ]  # fmt: skip


def count_in(valgrind_stderr: str) -> int:
    """The instructions callgrind counted, from what valgrind printed at exit."""
    found = _COLLECTED.findall(valgrind_stderr)
    if not found:
        raise RuntimeError(f"valgrind reported no count:\n{valgrind_stderr[-2000:]}")
    return int(found[-1])


def figures(bench_stdout: str, valgrind_stderr: str) -> dict:
    """The bench's JSON line with the count, and the count a timer or message, added."""
    result = json.loads(bench_stdout.strip().splitlines()[-1])
    result["instructions"] = count_in(valgrind_stderr)
    units, name = _PER_UNIT.get(result.get("bench"), (None, None))
    if units and result.get(units):
        result[name] = round(result["instructions"] / result[units])
    return result


def run(bench_args: list[str], timeout_s: float = TIMEOUT_S) -> dict:
    """`python -m bench.engine_bench BENCH_ARGS` under callgrind; its figures and the count."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="timerwheel-callgrind-") as scratch:
        done = subprocess.run(
            command(bench_args, os.path.join(scratch, "callgrind.out")), cwd=repo,
            env={**os.environ, UNDER_CALLGRIND: "1", "PYTHONHASHSEED": HASH_SEED},
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the bench failed under valgrind:\n{done.stderr[-2000:]}")
    return figures(done.stdout, done.stderr)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    if sys.argv[1] not in _PER_UNIT:
        sys.exit(f"bench.instructions: counts `burst` or `steady`, not {sys.argv[1]!r}")
    try:
        print(json.dumps(run(sys.argv[1:])))
    except RuntimeError as exc:
        sys.exit(f"bench.instructions: {exc}")


if __name__ == "__main__":
    main()
