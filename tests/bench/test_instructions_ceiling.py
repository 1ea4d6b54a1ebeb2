"""bench/ceiling.py: the engine's instruction count against the ceiling committed in
bench/instructions_ceiling.toml (issue 75: a change that adds 5% a message fails loudly),
and what the check says when a count is above it, or was recorded on another interpreter.

System tests: they need valgrind, which .ci/run installs. Without it they fail, saying so,
rather than skip: a skipped ceiling is no ceiling."""

from __future__ import annotations

import json
import shutil
import tomllib
import warnings

import pytest
from helpers.bench_runs import REPO, run_bench

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]
CEILING_FILE = REPO / "bench" / "instructions_ceiling.toml"
SMALL_BURST = ["burst", "--timers", "1000", "--no-sync"]


@pytest.fixture(autouse=True)
def valgrind() -> None:
    assert shutil.which("valgrind"), (
        "valgrind is missing: apt-get install valgrind (.ci/run installs it); the instruction "
        "ceiling is not checked without it"
    )


def test_the_engine_burst_stays_under_the_committed_instruction_ceiling():
    done = run_bench("ceiling", timeout_s=580)
    # The check's own message: measured, recorded, ceiling, a message's share, what to do.
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["instructions"] <= figures["ceiling"]
    if done.stderr.strip():  # well below the recorded count: pass, and ask for the record
        warnings.warn(done.stderr.strip(), stacklevel=1)


def test_the_committed_ceiling_is_a_whole_record():
    ceiling = tomllib.loads(CEILING_FILE.read_text())
    assert ceiling["args"][0] == "burst" and ceiling["instructions"] > 0
    assert 0 < ceiling["margin"] <= 0.03  # above 3%, a 5% a message change could pass
    assert ceiling["commit"] and ceiling["interpreter"]


def test_a_count_above_the_ceiling_fails_saying_by_how_much_and_how_to_record(tmp_path):
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(CEILING_FILE.read_text().replace(
        ceiling_args(), json.dumps(SMALL_BURST)))  # fmt: skip
    recorded = run_bench("ceiling", "--record", "--file", str(ceiling), timeout_s=300)
    assert recorded.returncode == 0, recorded.stderr
    written = tomllib.loads(ceiling.read_text())
    assert written["args"] == SMALL_BURST and written["margin"] == 0.03
    count = written["instructions"]
    assert written["instructions_per_message"] == round(count / 1_000)
    # The same code counted again, against a record 10% lower: 10% above it, over the 3%.
    ceiling.write_text(ceiling.read_text().replace(f"= {count}\n", f"= {count * 10 // 11}\n"))
    done = run_bench("ceiling", "--file", str(ceiling), timeout_s=300)
    assert done.returncode == 1
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["instructions"] > figures["ceiling"] and 8 < figures["change_percent"] < 12
    assert f"{figures['instructions']:,} instructions" in done.stderr
    assert f"above the ceiling of {figures['ceiling']:,} (+3%)" in done.stderr
    assert f"A message: {figures['instructions_per_message']:,} instructions" in done.stderr
    assert "python -m bench.ceiling --record" in done.stderr


def ceiling_args() -> str:
    args = tomllib.loads(CEILING_FILE.read_text())["args"]
    return json.dumps(args)


def test_a_ceiling_of_another_interpreter_fails_without_counting(tmp_path):
    ceiling = tmp_path / "ceiling.toml"
    recorded_on = tomllib.loads(CEILING_FILE.read_text())["interpreter"]
    ceiling.write_text(CEILING_FILE.read_text().replace(recorded_on, "CPython 2.7.18"))
    done = run_bench("ceiling", "--file", str(ceiling), timeout_s=60)
    assert done.returncode == 1 and not done.stdout
    assert "recorded on CPython 2.7.18, this is CPython" in done.stderr
    assert "not comparable" in done.stderr and "--record" in done.stderr
