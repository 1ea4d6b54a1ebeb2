"""`timerwheel loadtest --scenario failover`: what it refuses before anything starts, and
the figures it works out from the Stats views (the run itself against a real cluster is
tests/cluster/test_loadtest_failover.py)."""

from __future__ import annotations

import pytest

from timerwheel.cli.main import main
from timerwheel.loadtest.failover_watch import Fault, View, ownership

TWO = "127.0.0.1:1,127.0.0.1:2"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--fault", "true"], "--target"),
        (["--target", "127.0.0.1:1", "--fault", "true"], "--target"),
        (["--target", TWO], "--fault"),
        (["--target", TWO, "--fault", "  "], "--fault"),
        (["--target", TWO, "--fault", "true", "--fault-at", "20"], "--fault-at"),
        (["--target", TWO, "--fault", "true", "--fault-at", "50s"], "--fault-at 50000ms"),
        (["--target", "10.0.0.1:1,127.0.0.1:2", "--fault", "true"], "not a loopback"),
        (["--target", TWO, "--fault", "true", "--serve-flag=--no-sync"], "--serve-flag"),
    ],
)
def test_a_failover_run_that_cannot_measure_is_refused_naming_the_flag(args, named, capsys):
    assert main(["loadtest", "--scenario", "failover", "--no-progress", *args]) == 2
    assert named in capsys.readouterr().err


def test_the_failover_flags_are_refused_for_other_scenarios(capsys):
    assert main(["loadtest", "--scenario", "smoke", "--fault", "true"]) == 2
    assert "--scenario failover" in capsys.readouterr().err
    assert main(["loadtest", "--scenario", "smoke", "--target", TWO]) == 2
    assert "--scenario failover" in capsys.readouterr().err


def view(target: str, at_ms: int, holder: str | None, owners=()) -> View:
    return View(target, at_ms, holder, len(owners), tuple(owners))


def test_the_leases_are_taken_when_answering_nodes_hold_every_partition():
    fault = Fault("kill", at_ms=1_000, done_ms=1_010)
    before = [("a/1", 1), ("b/1", 2), ("b/1", 3)]
    after = [("a/1", 1), ("a/1", 7), ("c/1", 8)]
    views = [
        view("A", 900, "a/1", before), view("B", 950, "b/1", before),
        view("C", 960, "c/1", before),
        view("B", 1_050, None),  # dead from here on
        view("A", 1_100, "a/1", before), view("C", 1_150, "c/1", before),  # leases not expired
        view("A", 1_200, "a/1", [before[0], ("a/1", 7), before[2]]),  # one taken of two
        view("C", 1_300, "c/1", after),  # C holds p2 now: every partition held again
        view("A", 1_400, "a/1", after),
        view("C", 1_500, "c/1", after),
    ]  # fmt: skip
    owned = ownership(views, fault)
    assert owned.taken_ms == 1_300
    assert owned.moved == [1, 2]
    assert owned.retaken_ms == {1: 1_200, 2: 1_300}  # each partition's own takeover
    assert owned.baseline[2] == ("b/1", 3)
    assert owned.holder_of == {"A": "a/1", "B": "b/1", "C": "c/1"}


def test_no_answer_since_the_fault_from_a_node_holds_the_verdict_back():
    fault = Fault("kill", at_ms=1_000, done_ms=1_010)
    owners = [("a/1", 1), ("a/1", 2)]
    views = [view("A", 900, "a/1", owners), view("B", 900, "b/1", owners),
             view("A", 1_100, "a/1", owners)]  # fmt: skip
    assert ownership(views, fault).taken_ms is None  # B not heard from since
    views.append(view("B", 2_100, None))  # B stopped: its Stats timed out
    owned = ownership(views, fault)
    assert owned.taken_ms == 2_100 and owned.moved == []  # nothing of B's to move


def test_a_fault_that_lasts_has_its_partitions_taken_while_it_runs():
    """`kill -STOP`, a wait, `kill -CONT`: the takeover happens before the command ends,
    and an answer to a call made before the fault does not count as the node alive."""
    fault = Fault("stop; sleep; cont", at_ms=1_000, done_ms=9_000)
    before = [("a/1", 1), ("b/1", 2)]
    views = [
        view("A", 900, "a/1", before), view("B", 900, "b/1", before),
        View("B", 1_020, "b/1", 2, tuple(before), asked_ms=990),  # asked before the fault
        view("A", 1_100, "a/1", before),
        view("A", 4_000, "a/1", [("a/1", 1), ("a/1", 5)]),
    ]  # fmt: skip
    assert ownership(views, fault).taken_ms is None  # B not heard from since the fault
    views.append(view("B", 2_100, None))  # its Stats call timed out: stopped
    owned = ownership(views, fault)
    assert owned.taken_ms == 4_000 and owned.moved == [1]
