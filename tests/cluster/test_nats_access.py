"""A node's NATS credentials and TLS (docs/cluster.md, "NATS credentials and TLS"): the
flags are checked at start, naming the flag and the path; against a real nats-server that
requires a user and password over mutual TLS (a CA and certificates this test makes), a
node with the right ones forms its partitions and a timer sent to it fires; with a wrong
password, without the CA or without a client certificate it fails to start at once with
an error saying what NATS refused (not a hang, not the node's 60 s start bound). A token
in the URL works as nats-server's `authorization { token }`.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.credentials import make_pki
from helpers.serve_process import ServeProcess
from helpers.streams import Collector

from timerwheel.client import TimerClient
from timerwheel.cluster.nats_connect import redacted, refusal
from timerwheel.cluster.settings import NodeSettings
from timerwheel.procs.local_cluster import free_ports, nats_config, nats_server_path
from timerwheel.wheels.settings import SettingsError

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")
PARTITIONS = 2
READY_S = 30.0
START_S = 90.0
FIRE_S = 60.0
REFUSED_S = 30.0  # well under the node's 60 s bound on a first connect to no server
CREDS = """-----BEGIN NATS USER JWT-----
eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.sig
------END NATS USER JWT------

-----BEGIN USER NKEY SEED-----
SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4
------END USER NKEY SEED------
"""


# == the flags, checked at start ==========================================================
def node(**files: str) -> NodeSettings:
    return NodeSettings("n1", ("nats://127.0.0.1:4222",), **files)  # type: ignore[arg-type]


def test_each_nats_file_is_checked_at_start_naming_its_flag_and_path(tmp_path):
    pki = make_pki(tmp_path)
    missing = str(tmp_path / "missing.creds")
    with pytest.raises(SettingsError, match=f"--nats-creds '{missing}': not a readable file"):
        node(nats_creds_file=missing)
    with pytest.raises(SettingsError, match=r"--nats-ca .*missing.pem.*not a readable file"):
        node(nats_ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(SettingsError, match=r"--nats-cert .* give both"):
        node(nats_cert_file=pki.client_cert)
    not_creds = tmp_path / "not.creds"
    not_creds.write_text("user: u\n")
    with pytest.raises(SettingsError, match=r"--nats-creds .*not a NATS user credentials file"):
        node(nats_creds_file=str(not_creds))
    with pytest.raises(SettingsError, match=r"--nats-ca .*not a PEM CA certificate"):
        node(nats_ca_file=str(not_creds))
    with pytest.raises(SettingsError, match=r"--nats-cert .*not a PEM certificate and its key"):
        node(nats_cert_file=pki.client_cert, nats_key_file=pki.server_key)  # not its key
    creds = tmp_path / "user.creds"
    creds.write_text(CREDS)
    made = node(
        nats_creds_file=str(creds), nats_ca_file=pki.ca, nats_cert_file=pki.client_cert,
        nats_key_file=pki.client_key,
    )  # fmt: skip
    assert made.nats_tls() is not None and node().nats_tls() is None


def test_the_nats_flags_need_cluster(tmp_path):
    done = subprocess.run(
        [TIMERWHEEL, "serve", "--nats-ca", "ca.pem", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--nats-ca needs --cluster" in done.stderr


def test_secrets_in_a_url_are_left_out_of_messages():
    assert redacted("nats://u:secret@10.0.0.1:4222") == "nats://***@10.0.0.1:4222"
    assert redacted("nats://tok@h:4222") == "nats://***@h:4222"
    assert redacted("nats://h:4222") == "nats://h:4222"
    assert refusal(Exception("nats: 'Authorization Violation'"))
    assert not refusal(ConnectionRefusedError("connect call failed"))


# == a real nats-server that requires them ================================================
@dataclass
class Server:
    port: int
    process: subprocess.Popen
    log: Path

    def url(self, userinfo: str = "") -> str:
        return f"nats://{userinfo}{'@' if userinfo else ''}127.0.0.1:{self.port}"


@contextlib.contextmanager
def nats_server(base: Path, extra: str) -> Iterator[Server]:
    """One JetStream nats-server on loopback with `extra` config (authorization, tls);
    always stopped."""
    base.mkdir(parents=True, exist_ok=True)
    client, route, http = free_ports(3)
    config = base / "nats.conf"
    text = nats_config("s1", "127.0.0.1", client, route, http, base / "store", [])
    config.write_text(text + extra)
    log = base / "nats.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [nats_server_path(), "-c", str(config)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + READY_S
        while True:
            assert process.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, f"nats-server not ready: {log.read_text()}"
                time.sleep(0.1)
        yield Server(client, process, log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def mutual_tls(pki) -> str:
    return (
        "authorization { user: tw, password: right-pass }\n"
        f'tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}", '
        f'ca_file: "{pki.ca}", verify: true, timeout: 2 }}\n'
    )


def refused_start(tmp_path: Path, name: str, url: str, *flags: str) -> tuple[str, float]:
    """`timerwheel serve --cluster` that must fail to start: its stderr and how long it
    took."""
    started = time.monotonic()
    done = subprocess.run(
        [TIMERWHEEL, "serve", "--cluster", url, "--node-name", name, "--partitions",
         str(PARTITIONS), "--replicas", "1", "--port", "0", "--data-dir",
         str(tmp_path / name), *flags],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    return done.stderr, took


@pytest.mark.system
@pytest.mark.timeout(150)
def test_right_credentials_over_mutual_tls_serve_and_wrong_ones_fail_fast(tmp_path):
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    client_tls = ("--nats-ca", pki.ca, "--nats-cert", pki.client_cert, "--nats-key", pki.client_key)
    with nats_server(tmp_path / "nats", mutual_tls(pki)) as server:
        stderr, took = refused_start(
            tmp_path, "wrong", server.url("tw:wrong-pass"), *client_tls
        )  # fmt: skip
        assert "refused this node's credentials" in stderr and "Authorization" in stderr
        assert "wrong-pass" not in stderr and took < REFUSED_S, (stderr, took)
        stderr, took = refused_start(tmp_path, "noca", server.url("tw:right-pass"))
        assert "TLS failed" in stderr and "no --nats-ca" in stderr, stderr
        assert took < REFUSED_S, took
        stderr, took = refused_start(
            tmp_path, "nocert", server.url("tw:right-pass"), "--nats-ca", pki.ca
        )  # fmt: skip
        assert "NATS at" in stderr and took < REFUSED_S, (stderr, took)
        serve = ServeProcess(
            tmp_path / "n1", "--cluster", server.url("tw:right-pass"), "--node-name", "n1",
            "--partitions", str(PARTITIONS), "--replicas", "1", *client_tls, start_s=START_S,
        )  # fmt: skip
        try:
            with TimerClient(serve.target) as client:
                deadline = time.monotonic() + 60
                while sorted(client.stats().cluster.owned) != list(range(PARTITIONS)):
                    assert time.monotonic() < deadline, client.stats().cluster
                    time.sleep(0.2)
                soon = client.send("orders", b"over tls", message_id="tls-nats-1", delay_ms=0)
                collector = Collector(client, "orders", max_in_flight=10)
                try:
                    fired = collector.wait_for(lambda c: soon.message_id in c.ids(), FIRE_S)
                    assert fired, (collector.ids(), collector.error, client.stats().cluster)
                finally:
                    collector.stop()
        finally:
            serve.kill()


@pytest.mark.system
@pytest.mark.timeout(300)
def test_a_token_in_the_url_is_accepted_and_a_missing_one_refused(tmp_path):
    with nats_server(tmp_path / "nats", "authorization { token: s3cret-token }\n") as server:
        stderr, took = refused_start(tmp_path, "none", server.url())
        assert "refused this node's credentials" in stderr and "no user:password" in stderr
        assert took < REFUSED_S, took
        (tmp_path / "pki").mkdir()
        pki = make_pki(tmp_path / "pki")  # TLS asked for of a server without it: refused
        stderr, _ = refused_start(
            tmp_path, "plain", server.url("s3cret-token"), "--nats-ca", pki.ca
        )
        assert "does not use TLS" in stderr and "s3cret" not in stderr, stderr
        serve = ServeProcess(
            tmp_path / "n1", "--cluster", server.url("s3cret-token"), "--node-name", "n1",
            "--partitions", str(PARTITIONS), "--replicas", "1", start_s=START_S,
        )  # fmt: skip
        try:
            with TimerClient(serve.target) as client:
                deadline = time.monotonic() + 60
                while sorted(client.stats().cluster.owned) != list(range(PARTITIONS)):
                    assert time.monotonic() < deadline, client.stats().cluster
                    time.sleep(0.2)
        finally:
            serve.kill()
