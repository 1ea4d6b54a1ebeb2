"""`timerwheel loadtest --scenario failover`: the argument checks and the run
(timerwheel.loadtest.failover), refused with exit status 2 before anything starts when
--target does not list at least two nodes or --fault is missing."""

from __future__ import annotations

import argparse
import json
import sys

from timerwheel.cli.commands.loadtest import OVERRIDES, duration_overrides, is_loopback
from timerwheel.cli.connection import connection_from_args
from timerwheel.durations import parse_duration_ms
from timerwheel.loadtest.scenarios import ScenarioError

NOT_HERE = ("--spawn", "--serve-flag", "--keep-data")  # a failover run spawns nothing


def run_failover(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args)
    except (ScenarioError, ValueError) as exc:
        print(f"timerwheel loadtest: {exc}", file=sys.stderr)
        return 2
    from timerwheel.loadtest import failover, failover_report  # heavy imports after the checks
    from timerwheel.loadtest.stopping import unwind_on_sigterm
    from timerwheel.observability.log_config import configure_logging

    configure_logging("warning", "console", sys.stderr)  # stdout carries the report only
    try:
        with unwind_on_sigterm("timerwheel loadtest"):
            fig = failover.run(plan)
    except (RuntimeError, TimeoutError, OSError) as exc:  # the run itself could not go on
        print(f"timerwheel loadtest: {exc}", file=sys.stderr)
        return 1
    print(failover_report.markdown(fig))
    if args.json:
        with open(args.json, "w") as out:
            out.write(json.dumps(fig, indent=2, sort_keys=True, default=str) + "\n")
    return 0 if fig["ok"] else 1


def _plan(args: argparse.Namespace):
    from timerwheel.loadtest.failover import DEFAULT_FAULT_AT_MS, FAILOVER, FailoverPlan

    given = [flag for flag in NOT_HERE if getattr(args, flag[2:].replace("-", "_"))]
    if given:
        raise ValueError(f"{given[0]}: the failover scenario runs against --target only")
    targets = tuple(t.strip() for t in (args.target or "").split(",") if t.strip())
    if not args.allow_remote:
        remote = [t for t in targets if not is_loopback(t)]
        if remote:
            raise ValueError(
                f"--target {remote[0]}: not a loopback address (give --allow-remote to "
                "load-test another machine)"
            )
    scenario = FAILOVER.with_overrides(
        **{name: getattr(args, name) for name, _, _ in OVERRIDES.values()},
        **duration_overrides(args),
    )
    fault_at_ms = DEFAULT_FAULT_AT_MS
    if args.fault_at is not None:
        fault_at_ms = parse_duration_ms(args.fault_at, "--fault-at")
    plan = FailoverPlan(
        scenario, targets, args.fault or "", fault_at_ms, connection_from_args(args)
    )
    plan.check()
    return plan
