"""TLS, mutual TLS, token roles and the exposure rule, over real gRPC on 127.0.0.1.

Certificates are made in the test (tests/helpers/credentials.py); every server binds
loopback port 0. The role table below is the contract of timerwheel.security.access.
"""

from __future__ import annotations

import itertools

import grpc
import pytest
from helpers.calls import status_of
from helpers.credentials import make_pki, write_tokens
from helpers.waits import WAIT_S
from structlog.testing import capture_logs

from timerwheel.client import TimerClient
from timerwheel.credentials import Tls
from timerwheel.security.protection import load_protection, log_protection
from timerwheel.security.settings import SecuritySettings, exposure_check
from timerwheel.server.app import TimerServer
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.settings import Settings, SettingsError

DENIED = grpc.StatusCode.PERMISSION_DENIED
_fresh = itertools.count()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


# == TLS and mutual TLS =====================================================================
def _tls_server(make_server, pki, mutual: bool):
    security = SecuritySettings(
        tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca if mutual else "",
    )  # fmt: skip
    return make_server(security=security)


def _roundtrip(target: str, **credentials) -> grpc.StatusCode | None:
    """None when a Send and a Get go through; the status code of the refusal otherwise."""
    with TimerClient(target, timeout_s=WAIT_S, **credentials) as client:
        try:
            sent = client.send("t", b"over tls", delay_ms=60_000)
            assert client.get(sent.message_id).body == b"over tls"
        except Exception as exc:
            return exc.code
    return None


def test_tls_serves_clients_that_trust_its_ca_only(make_server, pki):
    server = _tls_server(make_server, pki, mutual=False)
    assert _roundtrip(server.target, tls=Tls(ca_file=pki.ca)) is None
    assert _roundtrip(server.target) is grpc.StatusCode.UNAVAILABLE  # plaintext client
    assert _roundtrip(server.target, tls=Tls(ca_file=pki.wrong_ca)) is grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_refuses_a_client_without_a_certificate_of_its_ca(make_server, pki):
    server = _tls_server(make_server, pki, mutual=True)
    good = Tls(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    assert _roundtrip(server.target, tls=good) is None
    unavailable = grpc.StatusCode.UNAVAILABLE
    assert _roundtrip(server.target, tls=Tls(ca_file=pki.ca)) is unavailable
    wrong = Tls(ca_file=pki.ca, cert_file=pki.wrong_client_cert, key_file=pki.wrong_client_key)
    assert _roundtrip(server.target, tls=wrong) is unavailable


def test_unusable_tls_files_are_refused_before_anything_opens(tmp_path):
    data_dir = tmp_path / "data"
    (tmp_path / "not.pem").write_text("hello")
    for security, expected in (
        (SecuritySettings(tls_cert_file="c.pem", tls_key_file=str(tmp_path / "none.key")),
         "tls_key_file=.*none.key.*cannot read"),
        (SecuritySettings(tls_cert_file=str(tmp_path / "not.pem"),
                          tls_key_file=str(tmp_path / "not.pem")), "not a PEM file"),
    ):  # fmt: skip
        with pytest.raises(SettingsError, match=expected):
            TimerServer(Settings(data_dir=str(data_dir), port=0), security=security)
    assert not data_dir.exists()


# == tokens and roles =======================================================================
@pytest.fixture(scope="module")
def secured(tmp_path_factory, pki):
    """One TLS + token server for the module: (server, tokens, ca, export root)."""
    base = tmp_path_factory.mktemp("secured")
    tokens = write_tokens(base / "tokens.toml")
    (base / "exports").mkdir()
    security = SecuritySettings(
        tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
        auth_tokens_file=str(base / "tokens.toml"), export_root=str(base / "exports"),
        export_reserve_bytes=0,
    )  # fmt: skip
    settings = Settings(data_dir=str(base / "data"), port=0, sync_writes=False)
    server = TimerServer(settings, security=security).start()
    try:
        yield server, tokens, pki.ca
    finally:
        server.stop(grace_s=1.0)


def _client(secured, name: str | None) -> TimerClient:
    server, tokens, ca = secured
    token = {None: None, "stranger": "not-a-known-token"}.get(name, tokens.get(name or ""))
    return TimerClient(server.target, timeout_s=WAIT_S, tls=Tls(ca_file=ca), token=token)


def _topic() -> str:
    return f"orders.t{next(_fresh)}"


def _subscribe_first(client: TimerClient, admin: TimerClient) -> None:
    topic = _topic()
    admin.send(topic, b"due", delay_ms=0)
    with client.subscribe(topic) as subscription:
        assert next(iter(subscription))


def _series(admin: TimerClient) -> str:
    series_id = f"series-{next(_fresh)}"
    admin.send(_topic(), b"x", message_id=series_id, repeat=pb.Repeat(every_ms=60_000))
    return series_id


def _export(client: TimerClient, _admin: TimerClient) -> None:
    assert client.export(f"role-{next(_fresh)}").out_dir


CALLS = {
    "Send": lambda c, a: c.send(_topic(), b"x", delay_ms=60_000),
    "SendBatch": lambda c, a: c.send_batch([TimerClient.request(_topic(), b"x", delay_ms=1)]),
    "Cancel": lambda c, a: c.cancel(a.send(_topic(), b"x", delay_ms=60_000).message_id),
    "Get": lambda c, a: c.get(a.send(_topic(), b"x", delay_ms=60_000).message_id),
    "List": lambda c, a: c.list(_topic()),
    "Subscribe": _subscribe_first,
    "Ack": lambda c, a: c.ack(_topic(), ["no-such-id"]),
    "Nack": lambda c, a: c.nack(_topic(), ["no-such-id"]),
    "Reschedule": lambda c, a: c.reschedule(
        a.send(_topic(), b"x", delay_ms=60_000).message_id, delay_ms=120_000
    ),
    "Count": lambda c, a: c.count(_topic()),
    "Export": _export,
    "Stats": lambda c, a: c.stats(),
    "InFlight": lambda c, a: c.in_flight(_topic()),
    "Consumers": lambda c, a: c.consumers(),
    "PauseSeries": lambda c, a: c.pause_series(_series(a)),
    "ResumeSeries": lambda c, a: c.resume_series(_series(a)),
    "BulkCancel": lambda c, a: c.bulk_cancel(pb.TimerFilter(topic=_topic())),
    "Purge": lambda c, a: c.purge(pb.TimerFilter(topic=_topic())),
    "Redrive": lambda c, a: c.redrive(f"{_topic()}.dlq"),
    "Topics": lambda c, a: c.topics_page(),
    "ClusterMap": lambda c, a: c.cluster_map(),
}
ALLOWED = {
    "producer": {
        "Send",
        "SendBatch",
        "Cancel",
        "Reschedule",
        "Get",
        "List",
        "Count",
        "PauseSeries",
        "ResumeSeries",
        "BulkCancel",
        "ClusterMap",
    },
    "consumer": {"Get", "Subscribe", "Ack", "Nack", "ClusterMap"},
    "admin": set(CALLS),
}


def test_the_audit_covers_every_rpc_of_both_services():
    """A new RPC must get its row here, so the role table is audited in every cell."""
    methods = {
        method.name
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert set(CALLS) == methods


@pytest.mark.parametrize(
    ("role", "method"), [(role, method) for role in ALLOWED for method in CALLS]
)
def test_each_role_is_allowed_and_refused_by_the_table(secured, role, method):
    tokens = secured[1]
    with _client(secured, role) as client, _client(secured, "admin") as admin:
        if method in ALLOWED[role]:
            CALLS[method](client, admin)  # raises on any refusal
            return
        error = status_of(lambda: CALLS[method](client, admin))
    assert error.code == DENIED
    assert method in error.details and f"role {role}" in error.details
    assert tokens[role] not in error.details


@pytest.mark.parametrize("who", [None, "stranger"])
@pytest.mark.parametrize("method", sorted(CALLS))
def test_calls_without_a_known_token_are_unauthenticated(secured, who, method):
    with _client(secured, who) as client, _client(secured, "admin") as admin:
        error = status_of(lambda: CALLS[method](client, admin))
        assert error.code == grpc.StatusCode.UNAUTHENTICATED and method in error.details
        assert "not-a-known-token" not in error.details
        assert client.health_status() == "SERVING"  # health stays open


def test_a_token_limited_to_a_topic_prefix(secured):
    with (
        _client(secured, "orders-producer") as producer,
        _client(secured, "orders-consumer") as consumer,
        _client(secured, "admin") as admin,
    ):
        mine = producer.send("orders.eu", b"x", delay_ms=60_000)
        assert producer.get(mine.message_id).topic == "orders.eu"
        error = status_of(lambda: producer.send("payments", b"x", delay_ms=60_000))
        assert error.code == DENIED and "topic='payments'" in error.details
        batch = [TimerClient.request(t, b"x", delay_ms=60_000) for t in ("orders.a", "pay")]
        error = status_of(lambda: producer.send_batch(batch))
        assert error.code == DENIED and "messages[1].topic='pay'" in error.details
        assert admin.list("orders.a")[0] == [] and admin.list("pay")[0] == []  # none stored
        assert status_of(lambda: producer.list("payments")).code == DENIED
        assert status_of(lambda: producer.count("payments")).code == DENIED
        error = status_of(
            lambda: producer.send("orders.x", b"x", delay_ms=1, dead_letter_topic="payments")
        )
        assert error.code == DENIED and "dead_letter_topic='payments'" in error.details
        huge = "p" * (8 * 1024 * 1024)  # shown as a bounded prefix, not echoed whole
        error = status_of(lambda: producer.send(huge, b"x", delay_ms=60_000))
        assert error.code == DENIED and "topic='ppp" in error.details
        assert len(error.details) < 500, len(error.details)

        theirs = admin.send("payments", b"secret", delay_ms=60_000)
        unknown = status_of(lambda: producer.get("NO-SUCH-ID"))
        reschedule = lambda message_id: producer.reschedule(message_id, delay_ms=1)  # noqa: E731
        for call in (producer.get, producer.cancel, consumer.get, reschedule):
            error = status_of(lambda call=call: call(theirs.message_id))
            assert error.code == unknown.code == grpc.StatusCode.NOT_FOUND
            assert error.details == unknown.details.replace("NO-SUCH-ID", theirs.message_id)
        assert admin.get(theirs.message_id).state == 1  # still SCHEDULED

        assert status_of(lambda: next(iter(consumer.subscribe("payments")))).code == DENIED
        assert status_of(lambda: consumer.ack("payments", [theirs.message_id])).code == DENIED
        assert status_of(lambda: consumer.nack("payments", [theirs.message_id])).code == DENIED
        assert consumer.ack("orders.eu", [theirs.message_id]) == 0


def test_undecodable_requests_get_invalid_argument(secured, make_server):
    """A GetRequest whose message_id (field 1) is not UTF-8, as raw bytes on the wire."""
    raw = b"\x0a\x02\xff\xfe"
    plain = make_server()
    for client in (None, _client(secured, "admin")):
        channel = client.channel if client else grpc.insecure_channel(plain.target)
        get = channel.unary_unary("/timerwheel.v1.TimerService/Get")  # bytes in, bytes out
        with pytest.raises(grpc.RpcError) as caught:
            get(raw, timeout=WAIT_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "TimerService.Get" in caught.value.details()
        assert "UTF-8" in caught.value.details()
        channel.close()


# == the exposure rule ======================================================================
def test_a_non_loopback_bind_needs_tls_and_tokens_or_insecure(tmp_path):
    tls = {"tls_cert_file": "c.pem", "tls_key_file": "k.pem"}
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.10"):
        assert exposure_check(host, SecuritySettings()) is None
    for host in ("0.0.0.0", "::", "10.1.2.3", "tw.example.com"):
        for security in (SecuritySettings(), SecuritySettings(**tls),
                         SecuritySettings(auth_tokens_file="t.toml")):  # fmt: skip
            with pytest.raises(SettingsError, match=f"host={host!r}.*--insecure"):
                exposure_check(host, security)
        assert exposure_check(host, SecuritySettings(**tls, auth_tokens_file="t")) is None
        warning = exposure_check(host, SecuritySettings(insecure=True))
        assert "--insecure" in warning and "TLS" in warning and "tokens" in warning


def test_the_server_refuses_before_opening_anything_and_insecure_proceeds(tmp_path):
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=str(data_dir), host="0.0.0.0", port=0)
    with pytest.raises(SettingsError, match="not a loopback address"):
        TimerServer(settings)
    assert not data_dir.exists()  # refused before the store was opened or a port bound
    # With --insecure it goes on: here to opening the store, which is a file, and fails
    # there -- so nothing ever listens on 0.0.0.0 in this test.
    data_dir.write_text("not a store")
    with pytest.raises(Exception) as caught:
        TimerServer(settings, security=SecuritySettings(insecure=True))
    assert not isinstance(caught.value, SettingsError)


def test_a_non_loopback_metrics_host_needs_insecure_and_is_warned_of(tmp_path):
    """/metrics is plain HTTP without tokens: the console's rule. Nothing binds here."""
    tls_and_tokens = SecuritySettings(
        tls_cert_file="c.pem", tls_key_file="k.pem", auth_tokens_file="t.toml"
    )
    for security in (SecuritySettings(), tls_and_tokens):  # TLS on gRPC does not cover it
        with pytest.raises(SettingsError, match=r"metrics_host='0\.0\.0\.0'.*--insecure"):
            load_protection("127.0.0.1", security, None, "0.0.0.0")
    assert (
        load_protection("127.0.0.1", SecuritySettings(), None, "127.0.0.1").metrics_warning is None
    )
    protection = load_protection("127.0.0.1", SecuritySettings(insecure=True), None, "0.0.0.0")
    with capture_logs() as logs:
        log_protection(protection)
    [warning] = [entry for entry in logs if entry["event"] == "insecure_metrics"]
    assert "'0.0.0.0'" in warning["message"] and "--insecure" in warning["message"]
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=str(data_dir), port=0, metrics_port=0, metrics_host="0.0.0.0")
    with pytest.raises(SettingsError, match=r"metrics_host='0\.0\.0\.0'"):
        TimerServer(settings)
    assert not data_dir.exists()  # refused before the store was opened or a port bound


@pytest.mark.system  # spawned `timerwheel serve`, twice
def test_serve_refuses_a_public_metrics_host_without_insecure(tmp_path):
    import subprocess

    from helpers.serve_process import TIMERWHEEL

    for workers in ("0", "1"):
        args = [TIMERWHEEL, "serve", "--data-dir", str(tmp_path / "d"), "--port", "0",
                "--metrics-port", "0", "--metrics-host", "0.0.0.0",
                "--workers", workers]  # fmt: skip
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "metrics_host='0.0.0.0': not a loopback address" in done.stderr
        assert not (tmp_path / "d").exists()


@pytest.mark.system  # a spawned `timerwheel serve`
def test_serve_refuses_a_public_host_without_protection(serve_process, tmp_path):
    import subprocess

    from helpers.serve_process import TIMERWHEEL

    args = [TIMERWHEEL, "serve", "--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0",
            "--port", "0"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "not a loopback address" in done.stderr and "--insecure" in done.stderr
    assert not (tmp_path / "d").exists()
