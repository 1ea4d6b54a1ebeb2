"""`timerwheel bulk-cancel`, `purge` and `redrive` against a live server on loopback."""

from __future__ import annotations

import json

from helpers.credentials import write_tokens
from helpers.streams import Collector

from timerwheel.cli.main import main
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb


def test_bulk_cancel_one_page_then_the_rest_with_the_token(cli, client):
    ids = [client.send("orders", b"x", delay_ms=3_600_000 + i).message_id for i in range(3)]
    code, out, err = cli("bulk-cancel", "--topic", "orders", "--limit", "2")
    assert (code, out.strip()) == (0, "cancelled 2")
    token = err.split("--page-token ", 1)[1].split()[0]
    code, out, err = cli("bulk-cancel", "--topic", "orders", "--page-token", token, "--json")
    assert code == 0 and json.loads(out) == {
        "cancelled": 1, "calls": 1, "next_page_token": "", "more": False,
    }  # fmt: skip
    assert err == ""
    assert [client.get(i).state for i in ids] == [pb.CANCELLED] * 3


def test_purge_all_pages_by_id_prefix_and_time(cli, client):
    fired = [client.send("orders", b"x", delay_ms=0, message_id=f"acct-{i}") for i in range(3)]
    later = client.send("orders", b"x", delay_ms=3_600_000, message_id="acct-later")
    other = client.send("orders", b"x", delay_ms=3_600_000, message_id="other-1")
    assert {client.get(s.message_id).state for s in fired} == {pb.FIRED}  # due: fired at once
    code, out, _ = cli("purge", "--id-prefix", "acct-", "--limit", "1", "--all", "--json")
    result = json.loads(out)
    assert code == 0 and (result["cancelled"], result["purged"], result["more"]) == (1, 3, False)
    assert result["calls"] == 4  # one change a call; the last one knows none is left
    assert client.get(later.message_id).state == pb.CANCELLED
    assert client.get(other.message_id).state == pb.SCHEDULED
    code, out, _ = cli("purge", "--topic", "orders", "--from", "now", "--to", "+30m")
    assert (code, out.strip()) == (0, "cancelled 0, purged 0")
    assert client.get(other.message_id).state == pb.SCHEDULED


def test_redrive_moves_a_dead_letter_back(cli, client, collectors):
    failing = Collector(client, "jobs", auto_ack=False)
    collectors.append(failing)
    dead = client.send("jobs", b"x", delay_ms=0, max_attempts=1).message_id
    failing.wait_count(1)
    assert client.nack("jobs", [dead]).dead_lettered == 1
    code, out, err = cli("redrive", "jobs.dlq", "--topic", "other")
    assert (code, out.strip(), err) == (0, "moved 0", "")
    code, out, _ = cli("redrive", "jobs.dlq", "--all")
    assert (code, out.strip()) == (0, "moved 1")
    assert client.get(dead).topic == "jobs"


def test_bad_input_is_named_and_changes_nothing(cli, client):
    kept = client.send("orders", b"x", delay_ms=3_600_000).message_id
    code, _, err = cli("purge")
    assert code == 1 and "INVALID_ARGUMENT" in err and "filter='{}'" in err
    code, _, err = cli("bulk-cancel", "--topic", "orders", "--from", "soon")
    assert code == 2 and "--from='soon'" in err
    code, _, err = cli("bulk-cancel", "--topic", "orders", "--limit", "99999")
    assert code == 1 and "limit=99999" in err
    assert client.get(kept).state == pb.SCHEDULED


def test_a_consumer_token_cannot_purge(make_server, tmp_path, capsys):
    tokens = write_tokens(tmp_path / "tokens.toml")
    server = make_server(security=SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml")))
    for role in ("consumer", "admin"):
        (tmp_path / role).write_text(tokens[role])
    capsys.readouterr()
    base = ["purge", "--topic", "orders", "--target", server.target, "--token-file"]
    assert main([*base, str(tmp_path / "consumer")]) == 1
    assert "PERMISSION_DENIED" in capsys.readouterr().err
    assert main([*base, str(tmp_path / "admin")]) == 0
    assert capsys.readouterr().out.strip() == "cancelled 0, purged 0"
