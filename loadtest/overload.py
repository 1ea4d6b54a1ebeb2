"""The verdict of an overload run (`--scenario overload`): offered more than the server
sustains, on purpose.

There, the producers falling behind their schedule and not reaching the offered rate
is the expected outcome, not a failure: the run asks whether the excess was slowed at
the producers (longer send latency, sends refused RESOURCE_EXHAUSTED and retried with
backoff) while the fires stayed on time. So an overload run passes when nothing was
lost or early (the accounting's own problems, the producers' shortfall left out) and
the server's fire lateness P999 is within the scenario's target (`fire_p999_target_ms`).
"""

from __future__ import annotations

BACKPRESSURE_CODE = "RESOURCE_EXHAUSTED"


def overload_verdict(target_ms: int, fire: dict, send: dict) -> dict | None:
    """None for a run that is not an overload run (target 0). `fire`: the fire lateness
    summary (ms); `send`: the figures' send section."""
    if not target_ms:
        return None
    p999 = fire["p999"]
    return {
        "target_ms": target_ms,
        "p999_ms": p999,
        "fires": fire["count"],
        # No fire measured is no evidence the fires were on time.
        "met": fire["count"] > 0 and p999 <= target_ms,
        "refused_retried": send.get("refused_retried", 0),
        # refused when the producers were stopped (not retried then), or at the last retry
        "refused_given_up": send["errors"].get(f"send_{BACKPRESSURE_CODE}", 0),
        "rate_achieved": send["rate_achieved"],
        "rate_target": send["rate_target"],
    }


def verdict_line(verdict: dict) -> str:
    """One line: the P999 against the target, MET or NOT MET, and where the excess went."""
    state = "MET" if verdict["met"] else "NOT MET"
    if not verdict["fires"]:
        state += " (no fire was measured)"
    return (
        f"fire lateness P999 {verdict['p999_ms']:,} ms against the {verdict['target_ms']:,} "
        f"ms target: {state}; the excess at the producers: "
        f"{verdict['rate_achieved']:,} of {verdict['rate_target']:,} msg/s stored, "
        f"{verdict['refused_retried']:,} messages refused {BACKPRESSURE_CODE} and retried, "
        f"{verdict['refused_given_up']:,} not sent again (refused after the producers were "
        "stopped, or at the last retry)"
    )


def problems(verdict: dict | None) -> list[str]:
    """What fails an overload run beyond the accounting's problems."""
    if verdict is None or verdict["met"]:
        return []
    return [f"fire lateness P999 {verdict['p999_ms']} ms > {verdict['target_ms']} ms target"]
