"""`timerwheel stats`: the totals (pending, fired not acked, topics) come first."""

from __future__ import annotations

import json
import time

import pytest
from helpers.waits import WAIT_S

from timerwheel.cli.main import main
from timerwheel.client import TimerClient

pytestmark = pytest.mark.wallclock


def run(capsys, *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_stats_opens_with_the_totals(server, capsys):
    with TimerClient(server.target) as client:
        for topic, count in (("a", 2), ("b", 1)):
            client.send_batch([TimerClient.request(topic, b"x", delay_ms=60_000)] * count)
        client.send("c", b"due", delay_ms=0)  # fired at once, never acked
        deadline = time.monotonic() + WAIT_S
        while client.stats().unacked < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # pacing of a poll loop with a deadline: the due one fires

    lines = run(capsys, "stats", "--target", server.target).splitlines()
    assert lines[0].split() == ["pending", "3", "timers"]
    assert lines[1].split() == ["fired,", "not", "acked", "1"]
    assert lines[2].split() == ["topics", "3"]

    totals = json.loads(run(capsys, "stats", "--json", "--target", server.target))["totals"]
    assert totals == {"pending": 3, "fired_unacked": 1, "topics": 3}
