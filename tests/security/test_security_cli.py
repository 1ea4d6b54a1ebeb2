"""The command line against a secured `timerwheel serve`: TLS, mutual TLS, tokens, the
export root, and the load-test harness dialing it. Real processes, real certificates."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.credentials import make_pki, write_tokens

from timerwheel.cli.main import main
from timerwheel.security.tokens import load_tokens, sha256_hex
from timerwheel.wheels.settings import SettingsError

pytestmark = pytest.mark.system  # real `timerwheel serve` processes


@pytest.fixture
def secured_serve(serve_process, tmp_path):
    """`timerwheel serve` with mTLS, tokens (admin's stored plain) and an export root."""
    pki = make_pki(tmp_path)
    tokens = write_tokens(tmp_path / "tokens.toml", plain=("admin",))
    for name, token in tokens.items():
        (tmp_path / f"{name}.token").write_text(token + "\n")
    (tmp_path / "exports").mkdir()
    process = serve_process(
        tmp_path / "data", "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
        "--tls-client-ca", pki.ca, "--auth-tokens", str(tmp_path / "tokens.toml"),
        "--export-root", str(tmp_path / "exports"), "--export-reserve", "0",
    )  # fmt: skip
    tls = ["--tls-ca", pki.ca, "--tls-cert", pki.client_cert, "--tls-key", pki.client_key]
    return process, tls, tmp_path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_client_command_reaches_a_secured_server(secured_serve, capsys, monkeypatch):
    process, tls, base = secured_serve
    security = process.wait_event("security")
    assert security["tls"] and security["mutual_tls"] and security["tokens"] == 5
    assert process.wait_event("plain_tokens")["tokens"] == ["admin"]  # warned about at start
    target = ["--target", process.target, *tls]
    producer = ["--token-file", str(base / "producer.token")]

    code, out, err = _run(capsys, "send", "--topic", "t", "--body", "hi", "--delay", "1h",
                          "--json", *target, *producer)  # fmt: skip
    assert code == 0, err
    message_id = json.loads(out)["message_id"]
    code, out, _ = _run(capsys, "get", message_id, "--json", *target, *producer)
    assert code == 0 and json.loads(out)["topic"] == "t"
    code, out, _ = _run(capsys, "list", "--topic", "t", "--json", *target, *producer)
    assert code == 0 and json.loads(out)["message_id"] == message_id
    limited = ["--token-file", str(base / "orders-producer.token")]  # topics "orders." only
    code, _, err = _run(capsys, "get", message_id, *target, *limited)  # the engine's process
    assert code == 1 and f"NOT_FOUND: message_id={message_id!r}: no such timer" in err
    monkeypatch.setenv("TIMERWHEEL_TOKEN", (base / "producer.token").read_text().strip())
    code, out, _ = _run(capsys, "cancel", message_id, *target)  # the token from the env
    assert code == 0 and "CANCELLED" in out
    monkeypatch.delenv("TIMERWHEEL_TOKEN")

    code, _, err = _run(capsys, "get", message_id, *target)  # no token
    assert code == 1 and "UNAUTHENTICATED" in err
    consumer = ["--token-file", str(base / "consumer.token")]
    code, _, err = _run(capsys, "cancel", message_id, *target, *consumer)
    assert code == 1 and "PERMISSION_DENIED" in err and "role consumer" in err
    code, _, err = _run(capsys, "get", message_id, "--target", process.target,
                        "--tls-ca", tls[1], *producer)  # fmt: skip
    assert code == 1 and "UNAVAILABLE" in err  # mutual TLS: no client certificate

    admin = ["--token-file", str(base / "admin.token")]
    code, out, err = _run(capsys, "export", "--out", "nightly/1", *target, *admin)
    assert code == 0, err
    assert (base / "exports" / "nightly" / "1" / "manifest.json").exists()
    code, _, err = _run(capsys, "export", "--out", str(base / "elsewhere"), *target, *admin)
    assert code == 1 and "INVALID_ARGUMENT" in err and not (base / "elsewhere").exists()


def test_client_flags_are_checked_before_dialing(capsys, tmp_path):
    (tmp_path / "empty.token").write_text("\n")
    for args, fragment in (
        (["--tls-cert", "c.pem"], "--tls-cert='c.pem': no such file"),
        (["--token-file", str(tmp_path / "empty.token")], "is empty"),
        (["--token-file", str(tmp_path / "none.token")], "cannot read"),
    ):
        code, _, err = _run(capsys, "get", "x", *args)
        assert code == 2 and fragment in err
    (tmp_path / "t.token").write_text("secret-token")
    code, _, err = _run(capsys, "get", "x", "--target", "10.9.8.7:7070",
                        "--token-file", str(tmp_path / "t.token"))  # fmt: skip
    assert code == 2 and "only over TLS or to a loopback address" in err
    assert "secret-token" not in err


def test_loadtest_dials_a_secured_server(secured_serve, tmp_path):
    process, tls, base = secured_serve
    out = tmp_path / "figures.json"
    code = main([
        "loadtest", "--scenario", "smoke", "--target", process.target, "--rate", "500",
        "--duration", "1s", "--producers", "1", "--no-progress", "--json", str(out), *tls,
        "--token-file", str(base / "admin.token"),
    ])  # fmt: skip
    accounting = json.loads(out.read_text())["accounting"]
    assert code == 0, accounting["problems"]
    assert accounting["sent"] == 500 and accounting["acked"] == 500


# == the token file =========================================================================
def _table(tmp_path: Path, text: str):
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    return load_tokens(str(path))


def test_token_file_entries_authenticate_by_hash_and_keep_their_topics(tmp_path):
    table = _table(
        tmp_path,
        f"""
[[tokens]]
name = "p"
role = "producer"
sha256 = "{sha256_hex("alpha")}"
topics = ["orders."]

[[tokens]]
name = "a"
role = "admin"
token = "beta"
""",
    )
    assert table.authenticate("alpha").name == "p"
    assert table.authenticate("alpha").may_use("orders.eu")
    assert not table.authenticate("alpha").may_use("payments")
    assert table.authenticate("beta").role.value == "admin"
    assert table.authenticate("gamma") is None and table.authenticate("") is None
    assert table.plain_names == ("a",)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "expected one or more [[tokens]]"),
        ("[[tokens]]\nname='x'\nrole='root'\ntoken='t'", "role='root': must be one of"),
        ("[[tokens]]\nname='x'\nrole='admin'", "exactly one of sha256"),
        ("[[tokens]]\nname='x'\nrole='admin'\nsha256='abc'", "sha256='abc': must be 64 hex"),
        ("[[tokens]]\nname='x'\nrole='admin'\ntoken='t'\ntopics=['a.']", "cannot be limited"),
        ("[[tokens]]\nname='x'\nrole='producer'\ntoken='t'\ntopics='a.'", "topics='a.'"),
        ("[[tokens]]\nname='x'\nrole='admin'\ntoken='t'\nextra=1", "unknown keys ['extra']"),
        ("[[tokens]]\nname='x'\nrole='admin'\ntoken='t'\n[[tokens]]\nname='x'\nrole='admin'"
         "\ntoken='u'", "used twice: ['x']"),
        ("[[tokens]]\nname='x'\nrole='admin'\ntoken='t'\n[[tokens]]\nname='y'\nrole='admin'"
         "\ntoken='t'", "same token"),
        ("not toml [", "not valid TOML"),
    ],
)  # fmt: skip
def test_bad_token_files_are_refused_naming_the_entry(tmp_path, text, fragment):
    with pytest.raises(SettingsError) as caught:
        _table(tmp_path, text)
    assert fragment in str(caught.value) and "tokens.toml" in str(caught.value)
    assert "token='t'" not in str(caught.value)  # a plain token is never echoed


def test_serve_refuses_bad_security_flags_with_exit_2(tmp_path, capsys):
    data_dir = str(tmp_path / "data")
    for flags, fragment in (
        (["--tls-cert", "c.pem"], "give both"),
        (["--tls-client-ca", "ca.pem"], "mutual TLS needs"),
        (["--export-reserve", "-1"], "export_reserve_bytes=-1"),
        (["--export-root", str(tmp_path / "nope")], "export_root="),
        (["--auth-tokens", str(tmp_path / "nope.toml")], "cannot read it"),
    ):
        code, _, err = _run(capsys, "serve", "--data-dir", data_dir, "--port", "0", *flags)
        assert code == 2 and fragment in err, err
    assert not os.path.exists(data_dir)
