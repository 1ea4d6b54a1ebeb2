"""The load test's scenarios and the command line that changes them: the presets and their
overrides, bad values refused naming them, loopback targets only by default, and the
duration flags, which carry their unit into the scenario (a bare number or an old
`-ms` flag refused with what to type)."""

from __future__ import annotations

import pytest

from timerwheel.cli.commands.loadtest import is_loopback
from timerwheel.loadtest.scenarios import SCENARIOS, ScenarioError, scenario


def test_scenarios_presets_and_overrides():
    assert set(SCENARIOS) == {
        "smoke", "tdmq", "tdmq-threads", "overload", "burst", "cancel", "backlog"
    }  # fmt: skip
    overload = scenario("overload")  # about twice what one process sustains
    assert (overload.rate, overload.scaled_delay_ms) == (40_000, (3_000, 60_000))
    threads = scenario("tdmq-threads")
    assert (threads.producer_threads, threads.batch, threads.rate) == (16, 1, 14_000)
    tdmq = scenario("tdmq")
    assert (tdmq.rate, tdmq.scaled_delay_ms) == (14_000, (30_000, 600_000))
    assert tdmq.with_overrides(delay_scale=0.1).scaled_delay_ms == (3_000, 60_000)
    burst = scenario("burst").with_overrides(count=300_000, rate=60_000)
    assert burst.messages == 300_000 and burst.duration_s == 5.0
    # the window opens burst_lead_ms after the planned end of the 5 s of sends
    assert burst.burst_offset_ms == 5_000 + 10_000 and tdmq.burst_offset_ms == 0
    assert scenario("backlog").send_overrun_ms == 600_000 > tdmq.send_overrun_ms
    assert scenario("smoke").with_overrides(rate=None).rate == scenario("smoke").rate


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"rate": 0}, "rate=0"),
        ({"body_bytes": 4}, "body_bytes=4"),
        ({"producer_threads": 4, "batch": 100}, "batch=100: must be 1 with producer_threads"),
        ({"connections": 0}, "connections=0: must be at least 1"),
        ({"producer_threads": 4, "batch": 1, "connections": 2}, "connections=2: must be 1"),
        ({"delay_min_ms": 10, "delay_max_ms": 5}, "delay_min_ms=10"),
        ({"cancel_share": 1.5}, "cancel_share=1.5"),
        ({"consumers": 0}, "consumers=0"),
        ({"ack_linger_ms": -1}, "ack_linger_ms=-1"),
        ({"send_overrun_ms": -1}, "send_overrun_ms=-1"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_scenario_overrides_refuse_bad_values_naming_them(changes, named):
    with pytest.raises(ScenarioError, match=named):
        scenario("smoke").with_overrides(**changes)
    with pytest.raises(ScenarioError, match="nope"):
        scenario("nope")


def test_loopback_targets_only_by_default():
    assert is_loopback("127.0.0.1:7070") and is_loopback("localhost:1")
    assert is_loopback("[::1]:7070") and is_loopback("127.3.2.1:80")
    assert not is_loopback("10.0.0.5:7070") and not is_loopback("example.org:7070")


def _loadtest_args(*flags: str):
    from timerwheel.cli.main import build_parser

    return build_parser().parse_args(["loadtest", "--scenario", "smoke", *flags])


def test_loadtest_duration_flags_take_units_into_the_scenario():
    from timerwheel.cli.commands.loadtest import duration_overrides

    args = _loadtest_args(
        "--duration", "2m", "--delay-min", "250ms", "--delay-max", "1.5s", "--grace", "2s",
        "--drain-timeout", "1m", "--send-overrun", "90s", "--ack-linger", "5ms",
        "--burst-window", "1s", "--burst-lead", "10s",
    )  # fmt: skip
    chosen = scenario("smoke").with_overrides(**duration_overrides(args))
    assert chosen.duration_s == 120.0 and chosen.messages == chosen.rate * 120
    assert (chosen.delay_min_ms, chosen.delay_max_ms) == (250, 1_500)
    assert (chosen.grace_ms, chosen.drain_timeout_ms) == (2_000, 60_000)
    assert (chosen.send_overrun_ms, chosen.ack_linger_ms) == (90_000, 5)
    assert (chosen.burst_window_ms, chosen.burst_lead_ms) == (1_000, 10_000)
    # A flag not given keeps the preset's value.
    assert scenario("smoke").with_overrides(**duration_overrides(_loadtest_args())) == scenario(
        "smoke"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--duration", "10"), "--duration='10': give a unit, e.g. 10s or 10ms"),
        (("--grace", "500"), "--grace='500': give a unit, e.g. 500s or 500ms"),
        (("--drain-timeout=60"), "--drain-timeout='60': give a unit"),
        (("--delay-min", "-1s"), "--delay-min='-1s': negative"),
        (("--send-overrun", "soon"), "--send-overrun='soon': not a duration"),
        (("--grace-ms", "500"), "--grace-ms is now --grace with a unit, e.g. --grace 500ms"),
        (("--delay-max-ms", "3000"), "--delay-max-ms is now --delay-max with a unit"),
    ],
)
def test_loadtest_refuses_a_bare_or_old_duration_naming_flag_and_fix(flags, message, capsys):
    """Refused before anything starts: exit 2 and one line that says what to type."""
    from timerwheel.cli.main import main

    flags = (flags,) if isinstance(flags, str) else flags
    code = main(["loadtest", "--scenario", "smoke", "--no-progress", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("timerwheel loadtest: ") and message in err, err
