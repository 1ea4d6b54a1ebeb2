"""The overload run's verdict (timerwheel.loadtest.overload) and how the report says it.
(The producer's answer to RESOURCE_EXHAUSTED: tests/loadtest/test_loadtest_producer.py.)"""

from __future__ import annotations

from helpers.loadtest_figures import fake_figures

from timerwheel.loadtest import report
from timerwheel.loadtest.accounting import Accounting
from timerwheel.loadtest.overload import overload_verdict, problems, verdict_line
from timerwheel.loadtest.scenarios import SCENARIOS

FIRE = {"count": 1_000, "mean": 3, "p50": 2, "p90": 5, "p99": 20, "p999": 40, "max": 90}
SEND = {"rate_achieved": 19_500, "rate_target": 40_000, "refused_retried": 12_300,
        "errors": {"send_RESOURCE_EXHAUSTED": 100}}  # fmt: skip


def test_only_the_overload_preset_is_judged_by_its_fires():
    assert SCENARIOS["overload"].fire_p999_target_ms == 50
    assert SCENARIOS["overload"].send_overrun_ms == 0  # behind at the end: stopped, expected
    assert SCENARIOS["tdmq"].fire_p999_target_ms == 0
    assert overload_verdict(0, FIRE, SEND) is None and problems(None) == []


def test_fires_within_the_target_meet_it_whatever_the_rate_reached():
    verdict = overload_verdict(50, FIRE, SEND)
    assert verdict["met"] and problems(verdict) == []
    assert verdict_line(verdict) == (
        "fire lateness P999 40 ms against the 50 ms target: MET; the excess at the "
        "producers: 19,500 of 40,000 msg/s stored, 12,300 messages refused "
        "RESOURCE_EXHAUSTED and retried, 100 not sent again (refused after the producers were "
        "stopped, or at the last retry)"
    )


def test_late_fires_or_none_measured_do_not_meet_it():
    late = overload_verdict(50, {**FIRE, "p999": 832}, SEND)
    assert not late["met"]
    assert problems(late) == ["fire lateness P999 832 ms > 50 ms target"]
    assert "against the 50 ms target: NOT MET;" in verdict_line(late)
    none = overload_verdict(50, {**FIRE, "count": 0, "p999": 0}, SEND)
    assert not none["met"] and "NOT MET (no fire was measured)" in verdict_line(none)


def _overload_figures(p999: int, lost: int = 0) -> dict:
    fig = fake_figures(lost=lost)
    fig["send"].update(
        rate_reached=False, rate_achieved=19_500, rate_target=40_000, refused_retried=12_300,
        producers_stopped_behind=4, max_behind_schedule_ms=9_000,
    )  # fmt: skip
    fig["overload"] = overload_verdict(50, {**FIRE, "p999": p999}, fig["send"])
    fig["ok"] = not fig["accounting"]["problems"] and not problems(fig["overload"])
    return fig


def test_the_report_leads_with_the_verdict_and_calls_the_shortfall_expected():
    text = report.markdown(_overload_figures(40))
    verdict = text.index("- overload verdict: fire lateness P999 40 ms against the 50 ms target")
    assert verdict < text.index("- offered rate reached:")  # the run's verdict comes first
    assert "- offered rate reached: no, as an overload run expects: could not reach" in text
    assert "- sends refused RESOURCE_EXHAUSTED and retried (backpressure), messages: 12,300" in text
    assert "- result: OK" in text


def test_the_report_fails_an_overload_run_on_late_fires_or_a_lost_message():
    assert "- result: FAILED: fire lateness P999 832 ms > 50 ms target" in report.markdown(
        _overload_figures(832)
    )
    assert "- result: FAILED: lost=2" in report.markdown(_overload_figures(40, lost=2))


def test_a_shortfall_is_not_an_accounting_problem_of_an_overload_run():
    assert Accounting(expect_delivery=True, sent=5, acked=5).problems() == []
