"""The failover scenario's figures (what `--json` writes) and its table, the fault suite's
columns (docs/cluster.md): acknowledged sends, lost, early, duplicates, failover seconds
and the lateness of the timers due inside the fault window.

* `failover.lease_taken_s`: from the fault command's start until every partition was
  owned again by a node that answers (Stats polled every 0.2 s on every node, so up to a
  poll late); None when that never happened before the end of the run.
* `failover.first_fire_s`: from the fault until every moved partition fired again: per
  moved partition, its first fire (the Delivery's `fired_at_ms`, the node's wall clock)
  of a timer by a node other than its owner before the fault (the new owner restored it
  and fires), and the last of those. Across machines it carries their clocks' offset
  against this one. `failover.by_partition` has each moved partition's own lease taken
  and first fire: partitions whose preferred node survived are taken first, the others
  after the takeover grace.
* `fault_window`: from the fault until the lease was taken (or the end, if never);
  `lateness_ms`: first receipt less deliver time of the acknowledged timers due in it.
"""

from __future__ import annotations

import datetime as dt
import os

from timerwheel.cluster.partitions import partition_of
from timerwheel.loadtest.accounting import SENT


def percentile(ordered: list[int], fraction: float) -> int:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0


def seconds(at_ms: int | None, since_ms: int) -> float | None:
    return None if at_ms is None else round((at_ms - since_ms) / 1000, 2)


def figures(run, accounting, receipts, owned, fault, *, senders, receivers, load, end_ms) -> dict:
    scenario = run.scenario
    partitions = len(owned.baseline)
    moved = set(owned.moved)
    fired: dict[int, int] = {}  # moved partition -> its first fire by another node
    for r in receipts:
        if r.fired_at_ms < fault.at_ms or not partitions:
            continue
        partition = partition_of(r.message_id, partitions)
        before = owned.baseline.get(partition, ("", 0))[0]
        if partition in moved and owned.holder_of.get(run.targets[r.node]) != before:
            fired[partition] = min(fired.get(partition, r.fired_at_ms), r.fired_at_ms)
    # Every moved partition firing again: the last of their first fires (None if one of
    # them never fired after the fault).
    first_fire_ms = max(fired.values()) if fired and len(fired) == len(moved) else None
    window = (fault.at_ms, owned.taken_ms or end_ms)
    states = {s.index: s.states for s in senders}
    first: dict[tuple[int, int], tuple[int, int]] = {}  # (producer, seq) -> (received, due)
    for r in receipts:
        key = (r.producer, r.seq)
        if key not in first or r.received_ms < first[key][0]:
            first[key] = (r.received_ms, r.deliver_at_ms)
    late = sorted(
        received - due
        for (producer, seq), (received, due) in first.items()
        if window[0] <= due <= window[1] and states[producer][seq] == SENT
    )
    problems = accounting.problems()
    if owned.taken_ms is None:
        problems.append("failover: not every partition was owned again by the end of the run")
    errors: dict[str, int] = {}
    for part in [s.errors for s in senders] + [r.errors for r in receivers]:
        for name, count in part.items():
            errors[name] = errors.get(name, 0) + count
    return {
        "scenario": scenario.name,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "targets": list(run.targets),
        "machine": {"cpus": os.cpu_count(), "load_before": load[0], "load_after": load[1]},
        "config": {
            "rate": scenario.rate,
            "duration_s": scenario.duration_s,
            "batch": scenario.batch,
            "topics": scenario.topics,
            "delay": scenario.describe_delay(),
            "fault_at_ms": run.plan.fault_at_ms,
            "producers": len(senders),
            "streams": len(receivers),
        },
        "fault": fault.as_dict(),
        "failover": {
            "lease_taken_s": seconds(owned.taken_ms, fault.at_ms),
            "first_fire_s": seconds(first_fire_ms, fault.at_ms),
            "partitions": partitions,
            "partitions_moved": sorted(moved),
            "by_partition": {
                p: {
                    "lease_taken_s": seconds(owned.retaken_ms.get(p), fault.at_ms),
                    "first_fire_s": seconds(fired.get(p), fault.at_ms),
                }
                for p in sorted(moved)
            },
        },
        "fault_window_ms": [window[0], window[1]],
        "due_in_fault_window": len(late),
        "lateness_ms": {
            "p50": percentile(late, 0.50),
            "p99": percentile(late, 0.99),
            "max": late[-1] if late else 0,
        },
        "acknowledged": accounting.sent,
        "lost": accounting.lost,
        "early": accounting.early,
        "duplicates": accounting.duplicates,
        "sends_retried_elsewhere": sum(s.retried for s in senders),
        "resubscribed": sum(max(r.resubscribed, 0) for r in receivers),
        "errors": errors,
        "accounting": accounting.as_dict(),
        "problems": problems,
        "ok": not problems,
    }


def markdown(fig: dict) -> str:
    failover, late = fig["failover"], fig["lateness_ms"]
    if not failover["partitions_moved"] and failover["lease_taken_s"] is not None:
        over = "no partition moved"
    else:
        over = (
            f"{_s(failover['lease_taken_s'])} lease taken, "
            f"{_s(failover['first_fire_s'])} all firing again"
        )
    load = fig["machine"]
    lines = [
        f"## timerwheel loadtest: failover ({fig['date']})",
        "",
        f"Targets {', '.join(fig['targets'])}; {fig['config']['rate']} sends/s for "
        f"{fig['config']['duration_s']:g} s, delays {fig['config']['delay']}; fault at "
        f"{fig['config']['fault_at_ms'] / 1000:g} s: `{fig['fault']['command']}` (exit status "
        f"{fig['fault']['exit_status']}). Load average {load['load_before'][0]:.1f} before, "
        f"{load['load_after'][0]:.1f} after, {load['cpus']} CPUs.",
        "",
        "| acknowledged | lost | early | duplicates | failover | due in fault window "
        "| lateness P50 / P99 / max |",
        "|---|---|---|---|---|---|---|",
        f"| {fig['acknowledged']:,} | {fig['lost']:,} | {fig['early']:,} | "
        f"{fig['duplicates']:,} | {over} | {fig['due_in_fault_window']:,} | "
        f"{late['p50'] / 1000:.1f} / {late['p99'] / 1000:.1f} / {late['max'] / 1000:.1f} s |",
        "",
        f"Partitions moved: {failover['partitions_moved'] or 'none'} of "
        f"{failover['partitions']}; batches sent again to another node: "
        f"{fig['sends_retried_elsewhere']:,}; streams opened again: {fig['resubscribed']}.",
    ]
    if fig["problems"]:
        lines += ["", "**FAILED**: " + "; ".join(fig["problems"])]
    else:
        lines += ["", "OK: nothing lost, nothing early."]
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"
