"""Running a `bench/` module as its users do (`python -m bench.NAME ...`) from a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def run_bench(module: str, *flags: str, timeout_s: float = 100) -> subprocess.CompletedProcess:
    """`python -m bench.<module> <flags>` from the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *flags], cwd=REPO, capture_output=True,
        text=True, timeout=timeout_s,
    )  # fmt: skip


def bench_figures(module: str, *flags: str, timeout_s: float = 100) -> dict:
    """The JSON line a bench prints last, after it exited 0."""
    done = run_bench(module, *flags, timeout_s=timeout_s)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
