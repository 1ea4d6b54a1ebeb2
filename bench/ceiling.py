"""The instruction-count ceiling CI checks: one small engine bench counted by
`bench.instructions`, against the count committed in bench/instructions_ceiling.toml.

    python -m bench.ceiling            # count the recorded shape; exit 1 above the ceiling
    python -m bench.ceiling --record   # count it and write the count as the new ceiling
    python -m bench.ceiling --file F   # another ceiling file (the tests' own)

The file holds the shape (the `bench.instructions` arguments), the count measured, the
commit it was measured at, the interpreter it ran on and the margin allowed above it: the
ceiling is `instructions * (1 + margin)`. A check prints one JSON line (measured, recorded,
ceiling, the same a message) and, above the ceiling or on another interpreter, says why on
stderr and exits 1. tests/bench/test_instructions_ceiling.py runs it in CI.

Raising the ceiling is a decision, not a fix for a red test: a change that costs
instructions a message says so, with the figures, and records the new count with
`--record` in the same commit (the file's history is then the count's). A change that
lowers the count records it too, so the next regression is measured from there: a check
more than the margin below the recorded count says so (it passes).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from bench.instructions import run

CEILING_FILE = Path(__file__).with_name("instructions_ceiling.toml")
# A check runs the shape once under valgrind: about a minute on this project's machines.
CHECK_TIMEOUT_S = 540
HEADER = """\
# The instruction-count ceiling CI checks (tests/bench/test_instructions_ceiling.py):
# `python -m bench.instructions ARGS` must count at most instructions * (1 + margin).
# Written by `python -m bench.ceiling --record`, deliberately, in the commit that moves
# the count (docs/performance.md, "The instruction ceiling"); not edited to make CI pass.
"""


def interpreter() -> str:
    """What the count depends on besides the code: the interpreter and its version."""
    return f"{platform.python_implementation()} {platform.python_version()}"


def load(path: Path = CEILING_FILE) -> dict:
    with path.open("rb") as file:
        return tomllib.load(file)


def dump(ceiling: dict) -> str:
    """The file's text: the header, then the fields in a fixed order."""
    args = ", ".join(json.dumps(arg) for arg in ceiling["args"])
    return (
        f"{HEADER}\n"
        f"args = [{args}]\n"
        f"instructions = {ceiling['instructions']}\n"
        f"instructions_per_message = {ceiling['instructions_per_message']}\n"
        f"margin = {ceiling['margin']}\n"
        f"commit = {json.dumps(ceiling['commit'])}  # HEAD when measured\n"
        f"interpreter = {json.dumps(ceiling['interpreter'])}\n"
    )


def messages_in(measured: dict) -> int:
    """The messages the counted part handled: a burst's timers, a steady run's acked."""
    return measured.get("timers") or measured["messages_acked"]


def limit(ceiling: dict) -> int:
    return int(ceiling["instructions"] * (1 + ceiling["margin"]))


def verdict(ceiling: dict, measured: dict, running_on: str) -> tuple[bool, dict, str]:
    """Whether `measured` (bench.instructions' figures) is within `ceiling`; the figures
    of the check; and, when it is not (or is well below), what to say and do."""
    count, messages = measured["instructions"], messages_in(measured)
    recorded, most = ceiling["instructions"], limit(ceiling)
    change = count / recorded - 1
    figures = {
        "args": ceiling["args"],
        "instructions": count,
        "recorded": recorded,
        "ceiling": most,
        "change_percent": round(change * 100, 2),
        "instructions_per_message": round(count / messages),
        "recorded_per_message": round(recorded / messages),
        "ceiling_per_message": round(most / messages),
        "commit": ceiling["commit"],
        "interpreter": running_on,
    }
    shape = "python -m bench.instructions " + " ".join(ceiling["args"])
    record = (
        f"If the cost is deliberate, say so in the commit with the figures and record the new "
        f"count in it: `python -m bench.ceiling --record` (rewrites {CEILING_FILE.name})."
    )
    if running_on != ceiling["interpreter"]:
        return False, figures, other_interpreter(ceiling, running_on)
    if count > most:
        return False, figures, (
            f"`{shape}` counted {count:,} instructions, {change:+.2%} on the {recorded:,} "
            f"recorded at {ceiling['commit']}: above the ceiling of {most:,} "
            f"(+{ceiling['margin']:.0%}). A message: {count / messages:,.0f} instructions, "
            f"{recorded / messages:,.0f} recorded, ceiling {most / messages:,.0f}. Find what a "
            f"message now executes more (`{shape}` on this commit and on the one before, each "
            f"in its own `git worktree`). {record}"
        )  # fmt: skip
    if count < recorded * (1 - ceiling["margin"]):
        return True, figures, (
            f"`{shape}` counted {count:,} instructions, {change:+.2%} on the {recorded:,} "
            f"recorded at {ceiling['commit']}: record the lower count "
            f"(`python -m bench.ceiling --record`) so a regression from here is caught."
        )  # fmt: skip
    return True, figures, ""


def other_interpreter(ceiling: dict, running_on: str) -> str:
    return (
        f"the ceiling was recorded on {ceiling['interpreter']}, this is {running_on}: counts "
        f"of different interpreters are not comparable. Where CI's interpreter changed, "
        f"record the count on the new one (`python -m bench.ceiling --record`) in the commit "
        f"that changes it."
    )


def head_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=CEILING_FILE.parent,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except OSError:  # no git: a source tree without its history
        return "unknown"
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ceiling", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--record", action="store_true", help="write the count as the ceiling")
    parser.add_argument("--file", type=Path, default=CEILING_FILE, help=f"default: {CEILING_FILE}")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench.ceiling: valgrind is missing: apt-get install valgrind (.ci/run does)")
    ceiling, running_on = load(args.file), interpreter()
    if not args.record and running_on != ceiling["interpreter"]:  # no count says more
        sys.exit(f"bench.ceiling: {other_interpreter(ceiling, running_on)}")
    try:
        measured = run(list(ceiling["args"]), timeout_s=CHECK_TIMEOUT_S)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        sys.exit(f"bench.ceiling: {exc}")
    if args.record:
        ceiling.update(
            instructions=measured["instructions"],
            instructions_per_message=round(measured["instructions"] / messages_in(measured)),
            commit=head_commit(), interpreter=running_on,
        )  # fmt: skip
        args.file.write_text(dump(ceiling))
        print(json.dumps({"recorded": ceiling}))
        return
    within, figures, message = verdict(ceiling, measured, running_on)
    print(json.dumps(figures))
    if message:
        print(f"bench.ceiling: {message}", file=sys.stderr)
    sys.exit(0 if within else 1)


if __name__ == "__main__":
    main()
