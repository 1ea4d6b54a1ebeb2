"""`timerwheel reschedule` (and the other feature commands) against a live server."""

from __future__ import annotations

import pytest
from conftest import wall_ms

from cli.main import main


@pytest.fixture
def cli(server, capsys):
    """Run `timerwheel ARGS --target <live server>`; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*args, "--target", server.target])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_reschedule_by_delay_time_and_level(cli, client):
    message_id = client.send("orders", b"x", delay_ms=3_600_000).message_id
    before = wall_ms()
    code, out, _ = cli("reschedule", message_id, "--delay", "5m")
    new_at = client.get(message_id).deliver_at_ms
    assert code == 0 and f"({new_at} ms)" in out
    assert before + 300_000 <= new_at <= wall_ms() + 300_000

    code, _, _ = cli("reschedule", message_id, "--at", str(new_at + 1_000))
    assert code == 0 and client.get(message_id).deliver_at_ms == new_at + 1_000
    code, _, _ = cli("reschedule", message_id, "--level", "18")  # 2 h
    assert code == 0 and client.get(message_id).deliver_at_ms >= before + 7_200_000


def test_reschedule_refusals_exit_1_or_2(cli, client):
    code, _, err = cli("reschedule", "no-such-id", "--delay", "5m")
    assert code == 1 and "NOT_FOUND" in err and "message_id='no-such-id'" in err
    fired = client.send("orders", b"x", delay_ms=0).message_id
    code, _, err = cli("reschedule", fired, "--delay", "5m")
    assert code == 1 and "FAILED_PRECONDITION" in err and "FIRED" in err
    code, out, err = cli("reschedule", fired, "--delay", "soon")
    assert code == 2 and "--delay='soon'" in err and out == ""
