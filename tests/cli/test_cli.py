"""The command line against a live server: `timerwheel.cli.main.main([...])` with captured output,
and the installed `timerwheel` script itself as a subprocess."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from helpers.serve_process import TIMERWHEEL
from helpers.time_of_day import wall_ms

from timerwheel.cli.main import main
from timerwheel.common import State

# `wallclock` (re-run at the worst moments of an hour by tests/system/test_time_of_day.py)
# marks the tests that store or read timers on the server's real clock; refused command
# lines and a `serve` that refuses to start are the same at any time of day.
wallclock = pytest.mark.wallclock


@wallclock
def test_send_each_time_form_then_get_human_and_json(cli, client):
    before = wall_ms()
    code, out, _ = cli("send", "--topic", "orders", "--body", "hello", "--delay", "5m",
                       "--property", "k=v", "--property", "x=1=2", "--id", "cli-1")  # fmt: skip
    assert code == 0 and out.startswith("sent cli-1, delivers at ")
    timer = client.get("cli-1")
    assert before + 300_000 <= timer.deliver_at_ms <= wall_ms() + 300_000
    assert dict(timer.properties) == {"k": "v", "x": "1=2"} and timer.body == b"hello"

    at = before + 3_600_000
    code, out, _ = cli("send", "--topic", "orders", "--at", str(at), "--json")
    assert code == 0 and json.loads(out)["deliver_at_ms"] == at
    code, out, _ = cli("send", "--topic", "orders", "--at", "2100-01-01T00:00:00", "--json")
    assert code == 1  # beyond the 400-day cap: refused by the server, not the CLI
    code, out, _ = cli("send", "--topic", "orders", "--level", "3", "--json")
    assert code == 0 and json.loads(out)["deliver_at_ms"] >= before + 10_000  # level 3: 10 s

    code, out, _ = cli("get", "cli-1")
    assert code == 0
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert lines["message_id"] == "cli-1" and lines["topic"] == "orders"
    assert lines["state"] == "SCHEDULED (in the minute wheel)" or lines["state"].startswith(
        "SCHEDULED (in the hour"
    )
    assert str(timer.deliver_at_ms) in lines["deliver_at"] and lines["properties"] == "k=v, x=1=2"
    assert "body" not in lines
    code, out, _ = cli("get", "cli-1", "--body")
    assert "hello" in out

    code, out, _ = cli("get", "cli-1", "--json", "--body")
    record = json.loads(out)
    assert record["state"] == "SCHEDULED" and record["deliver_at_ms"] == timer.deliver_at_ms
    assert record["body"] == "hello" and record["properties"] == {"k": "v", "x": "1=2"}


@wallclock
def test_get_unknown_id_exits_1_with_a_clear_message(cli):
    code, out, err = cli("get", "no-such-id")
    assert code == 1 and out == ""
    assert "NOT_FOUND" in err and "message_id='no-such-id'" in err


@wallclock
def test_cancel_then_get_shows_cancelled(cli, client):
    message_id = client.send("orders", b"x", delay_ms=60_000).message_id
    code, out, _ = cli("cancel", message_id)
    assert code == 0 and out.strip() == f"{message_id}: CANCELLED"
    assert client.get(message_id).state == State.CANCELLED
    fired = client.send("orders", b"x", delay_ms=0).message_id
    code, _, err = cli("cancel", fired)
    assert code == 1 and "FAILED_PRECONDITION" in err and "FIRED" in err


@wallclock
def test_list_one_page_and_all_pages(cli, client):
    base = wall_ms() + 3_600_000
    ids = [client.send("listed", b"x", deliver_at_ms=base + i * 1_000).message_id for i in range(7)]
    code, out, err = cli("list", "--topic", "listed", "--limit", "3")
    rows = out.strip().splitlines()
    assert code == 0 and rows[0].startswith("DELIVER_AT") and len(rows) == 4
    assert [row.split()[1] for row in rows[1:]] == ids[:3]
    assert "--page-token" in err

    code, out, err = cli("list", "--topic", "listed", "--limit", "3", "--all", "--json")
    assert code == 0 and [json.loads(line)["message_id"] for line in out.splitlines()] == ids

    code, out, _ = cli(
        "list", "--topic", "listed", "--from", str(base + 2_000), "--to", str(base + 4_000)
    )
    assert [row.split()[1] for row in out.strip().splitlines()[1:]] == ids[2:4]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("send", "--topic", "t", "--delay=-5s"), "--delay='-5s': a negative delay"),
        (("send", "--topic", "t", "--delay", "soon"), "--delay='soon': not a duration"),
        (("send", "--topic", "t", "--at", "tomorrow"), "--at='tomorrow': not a time"),
        (("send", "--topic", "t", "--delay", "1s", "--property", "novalue"), "KEY=VALUE"),
        (("list", "--topic", "t", "--from", "yesterday"), "--from='yesterday'"),
    ],
)
def test_bad_command_lines_exit_2_naming_the_value(cli, args, fragment):
    code, out, err = cli(*args)
    assert code == 2 and fragment in err and out == ""


@wallclock
def test_server_side_refusal_exits_1(cli):
    code, _, err = cli("send", "--topic", "bad topic", "--delay", "1s")
    assert code == 1 and "INVALID_ARGUMENT" in err and "topic='bad topic'" in err


@wallclock
def test_the_installed_script_end_to_end(server):
    """The real entry point, as an operator runs it."""

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [TIMERWHEEL, *args, "--target", server.target],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    sent = run("send", "--topic", "script", "--body", "hi", "--delay", "90s", "--json")
    assert sent.returncode == 0, sent.stderr
    message_id = json.loads(sent.stdout)["message_id"]
    got = run("get", message_id, "--json")
    assert got.returncode == 0 and json.loads(got.stdout)["state"] == "SCHEDULED"
    missing = run("get", "missing-id")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_unreachable_server_exits_1_with_a_hint(capsys):
    code = main(["get", "x", "--target", "127.0.0.1:1", "--timeout", "5s"])
    err = capsys.readouterr().err
    assert code == 1 and "UNAVAILABLE" in err and "is `timerwheel serve` running" in err


@pytest.mark.system  # a spawned `timerwheel serve`
def test_serve_on_a_busy_port_fails_clearly(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [TIMERWHEEL, "serve", "--data-dir", str(tmp_path / "data"), "--port", str(port),
             "--log-format", "json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1
    failure = [json.loads(line) for line in result.stdout.splitlines() if "start_failed" in line]
    assert failure and f"127.0.0.1:{port}" in failure[0]["error"]


@pytest.mark.system  # a spawned `timerwheel serve`
@pytest.mark.parametrize("workers", ["0", "1"])
def test_serve_refuses_a_data_dir_that_is_not_a_store_in_one_line(tmp_path, workers):
    """Nothing is created in it, the exit code is 1 and stderr says why in one line."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    result = subprocess.run(
        [TIMERWHEEL, "serve", "--data-dir", str(home), "--port", "0", "--workers", workers,
         "--log-format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("timerwheel serve: ") and "is not a timerwheel store" in line
    assert str(home) in line and "'.bashrc'" in line
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]
