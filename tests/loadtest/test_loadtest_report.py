"""The load test's report (timerwheel.loadtest.report) from made-up figures: its heading
says the run as it was and the preset apart, TDMQ's figures stand next to ours in a table
that fits a terminal, the producer shape is named, and a failed run or an offered rate
not reached is said plainly."""

from __future__ import annotations

from helpers.loadtest_figures import RUN_DATE, fake_figures

from timerwheel.loadtest import report


def test_report_heading_says_the_run_as_it_was_and_the_preset_apart():
    """A preset's description says its own rate and delays; a run with --rate or
    --delay-scale is headed by what it ran (a 40,000/s run was once headed "14,000 sends/s")."""
    fig = fake_figures()
    fig["description"] = "TDMQ's shape: 14,000 sends/s, delay 30 s..10 min"
    fig["config"].update(rate=40_000, messages=2_400_000, duration_s=60.0)
    heading, _, preset = report.markdown(fig).splitlines()[:3]
    assert heading == (
        f"### `tdmq` as run: 2,400,000 messages at 40,000/s for 60 s, delay 3 s..1 min ({RUN_DATE})"
    )
    assert preset == (
        "Preset `tdmq` before any flag: TDMQ's shape: 14,000 sends/s, delay 30 s..10 min."
    )

    fig["config"].update(
        rate=50_000, messages=1_000_000, duration_s=20.0, burst_window_ms=1_000,
        delay="all due in one 1000 ms window",
    )  # fmt: skip
    assert report.markdown(fig).splitlines()[0] == (
        "### `tdmq` as run: 1,000,000 messages at 50,000/s for 20 s, all due in one "
        f"1000 ms window ({RUN_DATE})"
    )


def test_report_puts_tdmq_next_to_ours_in_a_table_that_fits_a_terminal():
    text = report.markdown(fake_figures())
    cells = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ")
    ]
    rows = {row[0]: row[1:] for row in cells}
    header = next(line for line in text.splitlines() if line.startswith("| |"))
    assert header.startswith("| | TDMQ RocketMQ (8-core broker) | timerwheel (")
    assert rows["Producers"][0] == "16 threads" and rows["Delay error P999"][0] == "979 ms"
    assert rows["Send rate (msg/s)"][1] == "13,990 (target 14,000)"
    assert rows["Send latency avg"][1] == "1.5 ms" and rows["Send latency P99"][1] == "2.0 ms"
    assert [rows[f"Delay error {p}"][1] for p in ("P50", "P90", "P99", "P999", "max")] == [
        "2 ms", "5 ms", "9 ms", "12 ms", "15 ms",
    ]  # fmt: skip
    assert rows["Server CPU, send phase"][1] == "88.5% of 1 core = 44% of 2 cores"
    assert rows["Server peak RSS"][1] == "200 MiB"
    assert rows["Consumers"][1] == "1, acks gathered 10 ms"
    assert max(len(line) for line in text.splitlines() if line.startswith("|")) <= 100
    assert "- delay error: when the consumer received a message minus the deliver time" in text
    assert "server CPU, whole run (send, wait and drain phases" in text
    assert (
        "- delivery lag (server fire -> consumer receipt) P50 / P99 / P999 / max: "
        "2 / 9 / 7 / 8 ms" in text
    )
    assert "- result: OK" in text and "0.50 0.40 0.30" in text
    assert (
        "- interpreter (the harness's and the spawned server's): CPython 3.11.2, "
        "/usr/bin/python3.11, libpython static" in text
    )
    assert ("the whole machine with the harness): +1 s: 15 / 9 ms (server 97.5%, writer 61%, "
            "RocksDB 45.5%, machine 186%), +2 s: 6 / 2 ms (server 40%), +0 s: 4 / 1 ms\n"
            in text)  # fmt: skip
    assert (
        "(they share one GIL: the server at its ceiling, where a little more load grows the "
        "tail tenfold): 1 of 3 (+1 s to +1 s)\n" in text
    )
    # largest first, shares under half a percent left out
    assert "one core): writer 61.5%, grpc_calls 20%, rocksdb_compaction 3.2%\n" in text


def test_report_names_the_thread_producer_shape():
    figures = fake_figures()
    figures["config"].update(producers=1, producer_threads=16, batch=1)
    assert "| 1 x 16 threads, single sends, batching producer |" in report.markdown(figures)


def test_report_says_failed_and_why():
    text = report.markdown(fake_figures(lost=3))
    assert "- result: FAILED: lost=3" in text and "| 3 / 0 / 0 |" in text
    assert '"lost": 3' in report.to_json(fake_figures(lost=3))


def test_report_says_plainly_when_the_offered_rate_was_not_reached():
    figures = fake_figures()
    figures["send"].update(
        rate_reached=False, rate_achieved=3_012, rate_target=8_000, sent=90_386,
        planned=240_000, max_behind_schedule_ms=21_500, producers_stopped_behind=4,
    )  # fmt: skip
    text = report.markdown(figures)
    assert (
        "- offered rate reached: NO: could not reach the offered rate: 3,012 of 8,000 msg/s "
        "achieved, 90,386 of 240,000 planned messages stored, producers up to 21,500 ms "
        "behind schedule (4 stopped at the end of the send phase)"
    ) in text
    assert "- offered rate reached: yes (13,990 of 14,000 msg/s)" in report.markdown(fake_figures())
