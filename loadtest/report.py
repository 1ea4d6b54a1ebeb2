"""The report of a run: a Markdown table laid out like TDMQ's, and the JSON of the figures.

TDMQ's published row (8-core broker, 16 producer threads, 14,000 sends/s, delay 30 s to
10 min, one consumer) is printed above ours in the `tdmq` scenario, so the two read side
by side. Send latency is per request: with a batch of N, one request carries N messages
(TDMQ's is per message, one message per request).
"""

from __future__ import annotations

import json

from timerwheel.loadtest.figures import CEILING_PERCENT
from timerwheel.loadtest.interpreter import describe
from timerwheel.loadtest.overload import problems as overload_problems
from timerwheel.loadtest.overload import verdict_line

WORST_SECONDS = 5  # listed in the details, worst delay error first
TDMQ_REFERENCE = {
    "who": "TDMQ RocketMQ (8-core broker)",
    "producers": "16 threads",
    "rate": "14,000",
    "delay": "30 s..10 min",
    "consumers": "1",
    "latency_avg": "1.2 ms",
    "latency_p99": "-",
    "p50": "301 ms",
    "p90": "690 ms",
    "p99": "904 ms",
    "p999": "979 ms",
    "max": "-",
    "cpu": "30%",
    "rss": "-",
    "lost_dup_early": "-",
}

# One row per figure, one column per system: narrow enough for an 80-column terminal.
ROWS = (
    ("producers", "Producers"),
    ("rate", "Send rate (msg/s)"),
    ("delay", "Delay"),
    ("consumers", "Consumers"),
    ("latency_avg", "Send latency avg"),
    ("latency_p99", "Send latency P99"),
    ("p50", "Delay error P50"),
    ("p90", "Delay error P90"),
    ("p99", "Delay error P99"),
    ("p999", "Delay error P999"),
    ("max", "Delay error max"),
    ("cpu", "Server CPU, send phase"),
    ("rss", "Server peak RSS"),
    ("lost_dup_early", "Lost / dup / early"),
)

DEFINITIONS = """\
- delay error: when the consumer received a message minus the deliver time it was sent
  with (first deliveries only); TDMQ's figure is the same measure.
- send latency: one request, sent to answered; with a batch of N it carries N messages.
- server CPU, send phase: CPU time of the server's processes while the producers sent,
  as % of one core (100% = one core busy), and as a share of the machine's cores."""


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 10 else f"{value:g} ms"


def _us_as_ms(value_us: float) -> str:
    return f"{value_us / 1000:.1f} ms" if value_us < 100_000 else _ms(round(value_us / 1000))


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def our_row(fig: dict) -> dict[str, str]:
    config, send, delay, server = fig["config"], fig["send"], fig["delay_error_ms"], fig["server"]
    acc = fig["accounting"]
    has_delay = delay["count"] > 0
    cpus = fig["machine"]["cpus"] or 1
    cpu = server["cpu_percent_send"]
    return {
        "who": f"timerwheel ({cpus} cores, with the harness)",
        "producers": _producers(config),
        "rate": f"{send['rate_achieved']:,} (target {config['rate']:,})",
        "delay": config["delay"],
        "consumers": _consumers(config),
        "latency_avg": _us_as_ms(send["latency_us"]["mean"]),
        "latency_p99": _us_as_ms(send["latency_us"]["p99"]),
        "p50": _ms(delay["p50"]) if has_delay else "-",
        "p90": _ms(delay["p90"]) if has_delay else "-",
        "p99": _ms(delay["p99"]) if has_delay else "-",
        "p999": _ms(delay["p999"]) if has_delay else "-",
        "max": _ms(delay["max"]) if has_delay else "-",
        "cpu": f"{cpu:g}% of 1 core = {cpu / cpus:.0f}% of {cpus} cores",
        "rss": _mib(server["peak_rss_bytes"]),
        "lost_dup_early": f"{acc['lost']} / {acc['duplicates']} / {acc['early']}",
    }


def _consumers(config: dict) -> str:
    return f"{config['consumers']}, acks gathered {config['ack_linger_ms']} ms"


def _producers(config: dict) -> str:
    if config.get("producer_threads"):
        return (
            f"{config['producers']} x {config['producer_threads']} threads, "
            "single sends, batching producer"
        )
    return f"{config['producers']} processes, batch {config['batch']}"


def table(rows: list[dict[str, str]]) -> str:
    """Figures down, systems across (each row's "who" heads its column)."""
    lines = [
        "| | " + " | ".join(row["who"] for row in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    lines += [f"| {title} | " + " | ".join(row[key] for row in rows) + " |" for key, title in ROWS]
    return "\n".join(lines)


def details(fig: dict) -> str:
    """The accounting and the figures the main table has no column for."""
    acc, send, server, delivery = fig["accounting"], fig["send"], fig["server"], fig["delivery"]
    fire, lag, intended = fig["fire_lateness_ms"], fig["delivery_lag_ms"], send["from_intended_us"]
    ack = fig["ack_round_trip_ms"]
    load = fig["machine"]["load_before"]
    items = [
        ("offered rate reached", _rate_verdict(send, fig.get("overload") is not None)),
        ("sent (stored)", f"{acc['sent']:,} of {send['planned']:,} planned"),
        ("acked", f"{acc['acked']:,}"),
        ("cancelled", f"{acc['cancelled']:,} (too late to cancel: {send['cancel_too_late']:,})"),
        ("pending at the end", f"{acc['pending']:,}"),
        ("sent = acked + cancelled (+ pending, + late)", "yes" if acc["balanced"] else "NO"),
        ("lost / duplicated / early", f"{acc['lost']} / {acc['duplicates']} / {acc['early']}"),
        ("late: not received within the drain wait, still held by the server (scheduled, "
         "or fired and un-acked): late, not lost", f"{acc['late']:,}"),
        ("consumer streams subscribed again after an error / acks of unknown outcome",
         f"{delivery.get('resubscribed', 0)} / {acc.get('ack_unknown', 0):,}"),
        ("cancelled yet delivered / unexpected", f"{acc['cancelled_delivered']} / "
         f"{acc['unexpected']}"),
        ("sends refused RESOURCE_EXHAUSTED and retried (backpressure), messages",
         f"{send.get('refused_retried', 0):,}"),
        ("send errors", ", ".join(f"{k}={v}" for k, v in send["errors"].items()) or "none"),
        ("send latency from intended time p99 / max",
         f"{_us_as_ms(intended['p99'])} / {_us_as_ms(intended['max'])}"),
        ("fire lateness (server) P50 / P99 / P999 / max",
         f"{fire['p50']} / {fire['p99']} / {fire['p999']} / {fire['max']} ms"),
        ("delivery lag (server fire -> consumer receipt) P50 / P99 / P999 / max",
         f"{lag['p50']} / {lag['p99']} / {lag['p999']} / {lag['max']} ms"),
        ("consumers' Ack calls, sent -> answered, P50 / P99 / max (a window's room comes "
         "back when its Ack arrives)", f"{ack['p50']} / {ack['p99']} / {ack['max']} ms"),
        ("worst seconds of deliver time (from the first due: delay error max / fire "
         "lateness max; CPU then: the server, its writer, RocksDB's threads, the whole "
         "machine with the harness)", _worst_seconds(fig["timeline"])),
        ("server CPU by thread, send phase (the engine's process; 100% = one core)",
         _by_thread(server.get("thread_cpu_percent_send", {}))),
        (f"seconds with the engine process's Python threads at {CEILING_PERCENT}% of a core "
         "or more (they share one GIL: the server at its ceiling, where a little more load "
         "grows the tail tenfold)", _at_ceiling(fig.get("seconds_at_ceiling"), fig["timeline"])),
        ("first deliver time -> last receipt", f"{delivery['span_ms']:,} ms"),
        ("server's peak fired-but-unacked backlog", f"{server.get('peak_unacked', 0):,}"),
        ("server CPU, whole run (send, wait and drain phases; lower than the send phase's "
         "when the wait is idle)", f"{server['cpu_percent_run']:g}% of 1 core"),
        ("server data dir", f"{_mib(server['data_dir_bytes'])}"
         + (f", {server['bytes_per_timer']:,} bytes per pending timer"
            if server["bytes_per_timer"] else "")
         + (f", kept in {server['kept_dir']}" if server.get("kept_dir") else "")),
        ("harness CPU (all workers)", f"{fig['harness_cpu_s']} s"),
        ("load average before", " ".join(f"{x:.2f}" for x in load)),
        (_interpreter_label(fig.get("target")), describe(fig["machine"]["python"])),
        ("result", "OK" if fig["ok"] else "FAILED: " + "; ".join(_problems(fig))),
    ]  # fmt: skip
    verdict = fig.get("overload")
    if verdict is not None:  # an overload run: its own verdict first (loadtest.overload)
        items.insert(0, ("overload verdict", verdict_line(verdict)))
    return "\n".join(f"- {name}: {value}" for name, value in items)


def _interpreter_label(target: str | None) -> str:
    """A spawned server runs on the harness's interpreter (timerwheel.loadtest.server_proc); a
    dialled
    one on whatever its host runs."""
    if target == "spawned":
        return "interpreter (the harness's and the spawned server's)"
    return "interpreter (the harness's; the server dialled runs its own)"


def _worst_seconds(timeline: list[dict], count: int = WORST_SECONDS) -> str:
    worst = sorted(timeline, key=lambda row: -row["delay_max_ms"])[:count]
    return ", ".join(_second(row) for row in worst) or "none received"


# The CPU figures a worst second shows, where the timeline has them.
SECOND_CPU_COLUMNS = (
    ("writer_cpu_percent", "writer"),
    ("rocksdb_cpu_percent", "RocksDB"),
    ("machine_cpu_percent", "machine"),
)


def _second(row: dict) -> str:
    text = f"+{row['second']} s: {row['delay_max_ms']} / {row['fire_max_ms']} ms"
    cpu = row["server_cpu_percent"]
    if cpu is None:
        return text
    shown = [f"server {cpu:g}%"] + [
        f"{name} {row[column]:g}%"
        for column, name in SECOND_CPU_COLUMNS
        if row.get(column) is not None
    ]
    return f"{text} ({', '.join(shown)})"


def _at_ceiling(seconds: list[int] | None, timeline: list[dict]) -> str:
    if seconds is None or not any(row.get("gil_cpu_percent") for row in timeline):
        return "not reported"
    if not seconds:
        return f"none of {len(timeline)}"
    return f"{len(seconds)} of {len(timeline)} (+{seconds[0]} s to +{seconds[-1]} s)"


def _by_thread(shares: dict[str, float]) -> str:
    """The busy kinds of thread, largest first."""
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    return ", ".join(f"{kind} {pct:g}%" for kind, pct in ranked if pct >= 0.5) or "not reported"


def _problems(fig: dict) -> list[str]:
    return fig["accounting"]["problems"] + overload_problems(fig.get("overload"))


def _rate_verdict(send: dict, overload: bool = False) -> str:
    if send.get("rate_reached", True):
        return f"yes ({send['rate_achieved']:,} of {send['rate_target']:,} msg/s)"
    return (
        ("no, as an overload run expects: " if overload else "NO: ")
        + f"could not reach the offered rate: {send['rate_achieved']:,} of "
        f"{send['rate_target']:,} msg/s achieved, {send['sent']:,} of {send['planned']:,} "
        f"planned messages stored, producers up to {send['max_behind_schedule_ms']:,} ms "
        f"behind schedule ({send.get('producers_stopped_behind', 0)} stopped at the end of "
        "the send phase)"
    )


def markdown(fig: dict) -> str:
    rows = [TDMQ_REFERENCE] if fig["scenario"].startswith("tdmq") else []
    rows.append(our_row(fig))
    heading = f"### `{fig['scenario']}` as run: {as_run(fig['config'])} ({fig['date']})"
    preset = f"Preset `{fig['scenario']}` before any flag: {fig['description']}."
    return f"{heading}\n\n{preset}\n\n{table(rows)}\n\n{DEFINITIONS}\n\n{details(fig)}\n"


def as_run(config: dict) -> str:
    """The run's own shape, whatever the preset says (`--rate`, `--delay-scale` ...)."""
    due = config["delay"] if config.get("burst_window_ms") else f"delay {config['delay']}"
    return (
        f"{config['messages']:,} messages at {config['rate']:,}/s for "
        f"{config['duration_s']:g} s, {due}"
    )


def to_json(fig: dict) -> str:
    return json.dumps(fig, indent=2, sort_keys=True, default=str)
