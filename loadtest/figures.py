"""The figures of a run, as one JSON-ready dict (what `--json` writes and the table shows).

Units are in the names: `_ms` integer milliseconds, `_us` microseconds, `_bytes`, `_s`.

* `send.rate_achieved`: messages stored / (last answer - common start), in messages/s.
* `send.latency_us`: request sent -> answered; `send.from_intended_us`: intended send
  time -> answered (the open-loop figure: it includes time spent behind schedule).
* `delay_error_ms`: consumer receive time - deliver time, first attempts only (what a
  user sees); `fire_lateness_ms`: the server's fire time - deliver time (the Delivery's
  `fired_at_ms`); `delivery_lag_ms`: consumer receive time - the server's fire time (what
  delivery adds: the hub, the stream, the consumer's process); `early_ms`: how early, for
  receipts before the deliver time; `ack_round_trip_ms`: a consumer's Ack batch sent ->
  answered (a subscriber's room comes back when its Ack reaches the server, so slow
  answers mean Acks queued on the way there).
* `timeline`: per second of deliver time, counted from the first due second, the worst
  delay error and fire lateness of the first receipts due in it (`delay_max_ms`,
  `fire_max_ms`) and the server's CPU in that wall-clock second (`server_cpu_percent`,
  from the Stats samples a second apart; None where none is centred in it), its writer
  thread's (`writer_cpu_percent`) and that of the engine process's threads that run
  Python (`gil_cpu_percent`: they share one GIL, so near 100 the process is at its
  ceiling), RocksDB's flush and compaction threads' (`rocksdb_cpu_percent`), and the whole
  machine's (`machine_cpu_percent`, every process, the harness included; 200 = both cores
  of a 2-core machine busy): where in the run the tail happened, how busy the server was
  then, and whether it had a free core.
* `seconds_at_ceiling`: timeline seconds with `gil_cpu_percent` at or above
  `CEILING_PERCENT` (95).
* `server.cpu_percent_*`: from TimerAdmin.Stats cpu_seconds (100 = one core busy);
  `server.thread_cpu_percent_send`: the engine process's CPU in the send phase by kind of
  thread (Stats thread_cpu_seconds: writer, grpc_calls, rocksdb_compaction, ...);
  `peak_rss_bytes` the larger of the sampled RSS and the kernel's VmHWM (spawned server).
* `server.peak_unacked`: the most fired, not yet acked messages the server held at a
  sample: far above the consumers' in-flight window means delivery is behind firing.
* `server.bytes_per_timer`: data dir bytes (SST + WAL + manifest) / timers pending at
  the end (backlog).
* `server.kept_dir`: with `--keep-data`, the spawned server's work dir, kept: its data dir
  (RocksDB's LOG says whether writes stalled) and `server.log`; otherwise null.
"""

from __future__ import annotations

import datetime as dt
import os

from timerwheel.loadtest.accounting import HIGHEST_US, merge_histograms, merge_worst, summary
from timerwheel.loadtest.interpreter import interpreter
from timerwheel.loadtest.overload import overload_verdict
from timerwheel.loadtest.overload import problems as overload_problems
from timerwheel.loadtest.scenarios import Scenario
from timerwheel.observability.thread_cpu import GIL_KINDS, ROCKSDB_KINDS

CEILING_PERCENT = 95  # of a core, for the threads that share the engine process's GIL


def figures(
    scenario: Scenario, outcome: dict, load_before: tuple, load_after: tuple, target: str
) -> dict:
    accounting = outcome["accounting"]
    timeline_rows = _timeline(outcome["consumers"], outcome["sampler"])
    fire = _merged(outcome["consumers"], "fire_ms")
    send = _send(scenario, outcome)
    verdict = overload_verdict(scenario.fire_p999_target_ms, fire, send)
    return {
        "scenario": scenario.name,
        "description": scenario.description,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "target": target,
        "machine": {
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
            "python": interpreter(),  # a spawned server's too: it runs on the same one
        },
        "config": _config(scenario),
        "send": send,
        "delay_error_ms": _merged(outcome["consumers"], "delay_ms"),
        "fire_lateness_ms": fire,
        "overload": verdict,  # None unless an overload run (timerwheel.loadtest.overload)
        "delivery_lag_ms": _merged(outcome["consumers"], "lag_ms"),
        "early_ms": _merged(outcome["consumers"], "early_ms"),
        "ack_round_trip_ms": _merged(outcome["consumers"], "ack_ms"),
        "delivery": _delivery(outcome),
        "timeline": timeline_rows,
        "seconds_at_ceiling": at_ceiling(timeline_rows),
        "server": _server(outcome, accounting),
        "harness_cpu_s": round(
            sum(r["cpu_s"] for r in outcome["producers"] + outcome["consumers"]), 1
        ),
        "accounting": accounting.as_dict(),
        "ok": not accounting.problems() and not overload_problems(verdict),
    }


def _config(scenario: Scenario) -> dict:
    low_ms, high_ms = scenario.scaled_delay_ms
    return {
        "messages": scenario.messages,
        "rate": scenario.rate,
        "duration_s": round(scenario.duration_s, 3),
        "batch": scenario.batch,
        "producers": scenario.producers,
        "producer_threads": scenario.producer_threads,
        "consumers": scenario.consumers,
        "ack_linger_ms": scenario.ack_linger_ms,
        "topics": scenario.topics,
        "body_bytes": scenario.body_bytes,
        "delay": scenario.describe_delay(),
        "delay_min_ms": low_ms,
        "delay_max_ms": high_ms,
        "burst_window_ms": scenario.burst_window_ms,
        "cancel_share": scenario.cancel_share,
    }


def _merged(results: list[dict], key: str, highest: int | None = None) -> dict:
    blobs = [r[key] for r in results]
    return summary(merge_histograms(blobs, highest) if highest else merge_histograms(blobs))


def _send(scenario: Scenario, outcome: dict) -> dict:
    producers = outcome["producers"]
    sent = sum(r["sent"] for r in producers)
    start_ns = round(outcome["marks"].get("start", 0) * 1e9)
    last_ns = max((r["last_done_ns"] for r in producers), default=start_ns)
    elapsed_s = max(last_ns - start_ns, 1) / 1e9
    errors: dict[str, int] = {}
    for result in producers:
        for name, count in result["errors"].items():
            errors[name] = errors.get(name, 0) + count
    rate_achieved = round(sent / elapsed_s) if sent else 0
    aborted = sum(bool(r.get("aborted")) for r in producers)
    return {
        "planned": scenario.messages,
        "sent": sent,
        "rate_target": scenario.rate,
        "rate_achieved": rate_achieved,
        # The producers kept the offered rate: all planned sent, at >= 95% of the target
        # rate, none stopped behind schedule. Otherwise the run says so (report.details).
        "rate_reached": (
            not aborted
            and len(producers) == scenario.producers
            and sent + _cancel_or_unknown(producers) >= scenario.messages
            and rate_achieved >= 0.95 * scenario.rate
        ),
        "producers_stopped_behind": aborted,
        "producers_reported": len(producers),
        "seconds": round(elapsed_s, 3),
        "latency_us": _merged(producers, "latency_us", HIGHEST_US),
        "from_intended_us": _merged(producers, "intended_us", HIGHEST_US),
        "max_behind_schedule_ms": max((r["max_lag_ms"] for r in producers), default=0),
        "cancel_too_late": sum(r["cancel_too_late"] for r in producers),
        # Messages of requests refused RESOURCE_EXHAUSTED and sent again (backpressure).
        "refused_retried": sum(r.get("refused_retried", 0) for r in producers),
        "errors": errors,
    }


def _cancel_or_unknown(producers: list[dict]) -> int:
    """Planned messages whose send outcome is not UNSENT (refused or never sent)."""
    return sum(len(r["states"]) - r["states"].count(0) - r["sent"] for r in producers)


def _delivery(outcome: dict) -> dict:
    producers, consumers = outcome["producers"], outcome["consumers"]
    first_due_ms = min((r["min_deliver_ms"] for r in producers if r["min_deliver_ms"]), default=0)
    last_due_ms = max((r["max_deliver_ms"] for r in producers), default=0)
    last_received_ms = max((r["last_received_ms"] for r in consumers), default=0)
    return {
        "received": sum(r["received"] for r in consumers),
        "redelivered": sum(r["redelivered"] for r in consumers),
        # Streams opened again after an error (a server worker killed, say).
        "resubscribed": sum(r.get("resubscribed", 0) for r in consumers),
        "foreign": sum(r["foreign"] for r in consumers),
        "first_due_ms": first_due_ms,
        "last_due_ms": last_due_ms,
        "last_received_ms": last_received_ms,
        # From the earliest deliver time to the last receipt: a burst's "all in N s".
        "span_ms": last_received_ms - first_due_ms if last_received_ms else 0,
    }


def at_ceiling(rows: list[dict]) -> list[int]:
    """The timeline's seconds in which the engine process's Python threads used at
    least `CEILING_PERCENT` of a core: at its ceiling, where queues (and tails) grow."""
    return [r["second"] for r in rows if (r.get("gil_cpu_percent") or 0) >= CEILING_PERCENT]


def _timeline(consumers: list[dict], sampler) -> list[dict]:
    return timeline(
        merge_worst(r["worst_delay_ms"] for r in consumers),
        sampler.cpu_percent_by_second(),
        fire_worst=merge_worst(r["worst_fire_ms"] for r in consumers),
        columns={
            "writer_cpu_percent": sampler.cpu_percent_by_second(("writer",)),
            "gil_cpu_percent": sampler.cpu_percent_by_second(GIL_KINDS),
            "rocksdb_cpu_percent": sampler.cpu_percent_by_second(ROCKSDB_KINDS),
            "machine_cpu_percent": sampler.machine_percent_by_second(),
        },
    )


def timeline(
    delay_worst: dict[int, int], cpu_by_second: dict[int, float],
    fire_worst: dict[int, int] | None = None, columns: dict[str, dict[int, float]] | None = None,
) -> list[dict]:  # fmt: skip
    """Per second of deliver time (epoch seconds in, counted from the first due second
    out): the worst delay error (and fire lateness, where the server reports one) of the
    first receipts due in it, and the server's CPU in that second (None where no sample
    interval is centred in it), so a tail can be placed in time and set beside the load;
    `columns` adds more CPU figures, each by second (kinds of the engine's threads, the
    whole machine). The Redis peer (bench/peer_redis.py) makes the same rows, without
    fire lateness or threads."""
    first = min(delay_worst, default=0)
    rows = []
    for second in sorted(delay_worst):
        row = {"second": second - first, "delay_max_ms": delay_worst[second]}
        if fire_worst is not None:
            row["fire_max_ms"] = fire_worst.get(second, 0)
        row["server_cpu_percent"] = cpu_by_second.get(second)
        for column, by_second in (columns or {}).items():
            row[column] = by_second.get(second)
        rows.append(row)
    return rows


def _server(outcome: dict, accounting) -> dict:
    sampler, marks = outcome["sampler"], outcome["marks"]
    start_s, sent_s = marks.get("start", 0), marks.get("sent", 0)
    last = sampler.last()
    pending = accounting.pending
    data_dir_bytes = last.data_dir_bytes if last else 0
    return {
        "cpu_percent_send": sampler.cpu_percent(start_s, sent_s),
        "cpu_percent_run": sampler.cpu_percent(start_s, marks.get("end", sent_s)),
        "thread_cpu_percent_send": sampler.thread_cpu_percent(start_s, sent_s),
        "peak_rss_bytes": max(sampler.peak_rss_bytes(), outcome["vmhwm_bytes"]),
        "sampled_peak_rss_bytes": sampler.peak_rss_bytes(),
        "final_rss_bytes": last.rss_bytes if last else 0,
        "data_dir_bytes": data_dir_bytes,
        "keys": last.keys if last else {},
        "peak_unacked": max((s.unacked for s in sampler.samples), default=0),
        "bytes_per_timer": round(data_dir_bytes / pending, 1) if pending else None,
        "kept_dir": outcome.get("kept_dir"),  # --keep-data: the data dir and server.log
        "stats_samples": len(sampler.samples),
        "stats_errors": sampler.errors,
    }
