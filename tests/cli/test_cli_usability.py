"""What a new user tripped over on the command line (issue 12), each checked for real:
help and version, a mistyped flag named, a bare --target host, `stats`, `get --body`,
a re-send of a stored id, `tail` in ack and peek mode, one-line `serve` failures, and
`report` without its extra."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest
from helpers.serve_process import TIMERWHEEL
from helpers.waits import WAIT_S

import timerwheel.types
from timerwheel.cli.main import main
from timerwheel.client import TimerClient
from timerwheel.common import State


def test_timerwheel_alone_prints_help_and_version_prints_it(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: timerwheel") and "send" in out and "tail" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("timerwheel ")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["send", "--topic", "t", "--dealy", "5s"], "unknown flag --dealy (did you mean --delay?)"),
        (["send", "--topic", "t", "--del", "5s"], "unknown flag --del (did you mean --delay?)"),
        (["list", "--topic", "t", "--limt=5"], "unknown flag --limt (did you mean --limit?)"),
    ],
)
def test_a_mistyped_flag_is_named_and_never_abbreviated(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_a_bare_target_host_dials_port_7070(server, cli, monkeypatch):
    """`--target 127.0.0.1` dials the default port: moved here to the test server's port."""
    monkeypatch.setattr(timerwheel.types, "DEFAULT_PORT", server.port)
    code, out, _ = cli("stats", target="127.0.0.1")
    assert code == 0 and "fired, not acked" in out


def test_an_unreachable_bare_host_names_port_7070_in_the_hint(capsys, monkeypatch):
    """The default port is moved to one nothing listens on: a server an operator left
    running on 7070 (the README's) would answer, and there would be no hint to check."""
    assert timerwheel.types.DEFAULT_PORT == 7070
    closed = _closed_port()
    monkeypatch.setattr(timerwheel.types, "DEFAULT_PORT", closed)
    code = main(["get", "x", "--target", "127.0.0.1", "--timeout", "500ms"])
    err = capsys.readouterr().err
    assert code == 1 and f"127.0.0.1:{closed}" in err  # the default port, not :443


def _closed_port() -> int:
    """A port that was free a moment ago, and is closed now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_stats_human_and_json(cli, client):
    client.send("s", b"x", delay_ms="1h")
    code, out, _ = cli("stats")
    lines = dict(line.split(None, 1) for line in out.splitlines() if line.startswith("keys"))
    assert code == 0 and "messages=1" in lines["keys"]
    assert "clock steps       0 forward, 0 backward\n" in out
    assert "CPU by thread     writer " in out  # the writer first: the server's headroom
    code, out, _ = cli("stats", "--json")
    assert code == 0 and '"messages": "1"' in out


@pytest.mark.system  # a spawned `timerwheel get`
def test_get_body_prints_only_the_body(client):
    client.send("b", b"just \xff the body", delay_ms="1h", message_id="body-1")
    result = subprocess.run(
        [TIMERWHEEL, "get", "body-1", "--body", "--target", client.target],
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout == b"just \xff the body"


def test_resending_a_stored_id_says_it_existed_and_in_which_state(cli):
    send = ("send", "--topic", "o", "--body", "b", "--delay", "1h", "--id", "again")
    assert cli(*send)[0] == 0
    code, out, _ = cli(*send)
    assert code == 0 and out.startswith("again already existed (SCHEDULED): nothing new")
    assert cli("cancel", "again")[0] == 0
    code, out, _ = cli(*send)
    assert out.strip() == (
        "again already existed (CANCELLED): nothing new was stored; "
        "it was cancelled and will not be delivered"
    )
    code, out, _ = cli(*send, "--json")
    assert '"existed": true' in out and '"existing_state": "CANCELLED"' in out


def _fire_now(client: TimerClient, topic: str, count: int) -> list[str]:
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=0) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


def test_tail_prints_deliveries_and_acks_them(cli, client):
    sent = _fire_now(client, "tailed", 3)
    code, out, err = cli("tail", "tailed", "--max", "3", "--body")
    assert code == 0 and "3 message(s) printed and acked" in err
    lines = out.splitlines()
    assert sorted(line.split()[1] for line in lines) == sorted(sent)
    assert all("attempt 1" in line and "'m" in line for line in lines)
    assert {client.get(m).state for m in sent} == {State.ACKED}


def test_tail_peek_acks_nothing_and_the_messages_come_again(cli, client):
    [message_id] = _fire_now(client, "peeked", 1)
    code, out, _ = cli("tail", "peeked", "--peek", "--max", "1", "--json")
    assert code == 0 and f'"message_id": "{message_id}"' in out and '"attempt": 1' in out
    assert client.get(message_id).state is State.FIRED
    code, out, _ = cli("tail", "peeked", "--max", "1", "--json")
    assert '"attempt": 2' in out  # given back when the peeking stream ended
    assert client.get(message_id).state is State.ACKED


def test_tail_waits_for_a_timer_to_fire(cli, client):
    result: list[tuple[int, str, str]] = []
    thread = threading.Thread(target=lambda: result.append(cli("tail", "later", "--max", "1")))
    thread.start()
    sent = client.send("later", b"soon", delay_ms="300ms")
    thread.join(WAIT_S)
    assert not thread.is_alive() and result[0][0] == 0
    assert sent.message_id in result[0][1]


def _serve(data_dir, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TIMERWHEEL, "serve", "--data-dir", str(data_dir), "--port", str(port),
         "--log-format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.system  # a spawned `timerwheel serve`
def test_a_second_serve_on_the_same_data_dir_says_so_in_one_line(tmp_path, serve_process):
    serve_process(tmp_path / "data")
    result = _serve(tmp_path / "data", 0)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"timerwheel serve: data dir {tmp_path / 'data'} is in use by another timerwheel "
        "server (its RocksDB LOCK is held); stop that server or give another --data-dir"
    )


@pytest.mark.system  # a spawned `timerwheel serve`
def test_a_busy_port_says_so_in_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _serve(tmp_path / "data", port)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"timerwheel serve: port {port} on 127.0.0.1 is already in use; stop what listens "
        "there or give another --port (--port 0 picks a free one)"
    )


def test_report_without_its_extra_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    for module in ("timerwheel.capacity.report", "timerwheel.capacity.tables"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if `pip install -e .` only
    code = main(["report", "--input", str(tmp_path), "--out", str(tmp_path / "r")])
    assert code == 2
    assert "pip install 'timerwheel[report]'" in capsys.readouterr().err
