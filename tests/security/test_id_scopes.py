"""Client-chosen ids are scoped per token (issue 76, docs/decisions/0012): over real gRPC on
127.0.0.1 with two tokens of disjoint topic prefixes, neither can learn of nor claim the
other's ids; admin and the console find both; a store written before scopes existed keeps
working."""

from __future__ import annotations

import json
import urllib.request

import grpc
import pytest
from helpers.calls import status_of
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.security.scopes import scope_of, stored, view
from timerwheel.security.settings import SecuritySettings
from timerwheel.security.tokens import sha256_hex
from timerwheel.v1 import timerwheel_pb2 as pb

TOKENS = {
    "orders": ("producer", ["orders."]),
    "orders-consumer": ("consumer", ["orders."]),
    "billing": ("producer", ["billing."]),
    "admin": ("admin", []),
    # One tenant's tokens of different prefixes, sharing a pinned id scope.
    "acme-producer": ("producer", ["acme.orders.", "acme.invoices."], "acme"),
    "acme-consumer": ("consumer", ["acme.orders."], "acme"),
    "acme-refunds": ("producer", ["acme.refunds.", "acme.orders."], "acme"),
}
HOUR_MS = 3_600_000


def _write_tokens(path) -> dict[str, str]:
    secrets = {name: f"{name}-token-{'x' * 40}" for name in TOKENS}
    lines = []
    for name, (role, topics, *pinned) in TOKENS.items():
        lines += ["[[tokens]]", f'name = "{name}"', f'role = "{role}"']
        lines.append(f'sha256 = "{sha256_hex(secrets[name])}"')
        if topics:
            lines.append(f"topics = {json.dumps(topics)}")
        if pinned:
            lines.append(f'id_scope = "{pinned[0]}"')
    path.write_text("\n".join(lines) + "\n")
    return secrets


@pytest.fixture
def scoped(tmp_path, make_server):
    """(server factory over one data dir with tokens, client factory)."""
    secrets = _write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    data_dir = str(tmp_path / "data")
    clients: list[TimerClient] = []

    def start(**changes):
        return make_server(data_dir=data_dir, security=security, **changes)

    def client(server, name: str) -> TimerClient:
        made = TimerClient(server.target, timeout_s=WAIT_S, token=secrets[name])
        clients.append(made)
        return made

    yield start, client, data_dir
    for made in clients:
        made.close()


def _same_refusal(call_a, call_b, id_a: str, id_b: str) -> None:
    """Both calls refused with the same code and the same words, ids aside."""
    a, b = status_of(call_a), status_of(call_b)
    assert a.code == b.code, (a, b)
    assert a.details.replace(repr(id_a), "<id>") == b.details.replace(repr(id_b), "<id>")
    return a


def test_the_scope_of_a_token_is_its_prefixes():
    assert scope_of(()) == ""
    assert scope_of(("orders.",)) == "orders."
    assert scope_of(("orders.eu.", "orders.", "billing.")) == "billing.,orders."
    assert scope_of(("a b",)).startswith("~") and len(scope_of(("x" * 70,))) == 17
    for stored_id in ("orders./x", "x", "0" * 32, "orders./" + "A" * 32, "billing./x", "s#3"):
        assert stored("orders.", view("orders.", stored_id)) == stored_id
    assert view("orders.", "orders./x") == "x" and view("orders.", "x") == "/x"


def test_another_tenants_ids_are_neither_seen_nor_blocked(scoped):
    start, client, _ = scoped
    server = start()
    orders, billing, admin = (client(server, n) for n in ("orders", "billing", "admin"))
    sent = orders.send("orders.a", b"order secret", delay_ms=HOUR_MS, message_id="id-1")
    assert sent.message_id == "id-1"

    # The oracle is closed: an id held in orders. and one held nowhere look the same to
    # billing, valid request or not, by every call that names an id.
    for call in (
        lambda i: billing.get(i),
        lambda i: billing.cancel(i),
        lambda i: billing.reschedule(i, delay_ms=1),
        lambda i: billing.pause_series(i),
    ):
        refused = _same_refusal(
            lambda c=call: c("id-1"), lambda c=call: c("id-404"), "id-1", "id-404"
        )
        assert refused.code == grpc.StatusCode.NOT_FOUND
    for qualified in ("orders./id-1", "/id-1"):
        refused = _same_refusal(
            lambda q=qualified: billing.get(q), lambda: billing.get("orders./id-404"),
            qualified, "orders./id-404",
        )  # fmt: skip
        assert refused.code == grpc.StatusCode.NOT_FOUND
    invalid = {"delay_ms": -5}  # an invalid send answers the same with either id
    refused = _same_refusal(
        lambda: billing.send("billing.b", b"x", message_id="id-1", **invalid),
        lambda: billing.send("billing.b", b"x", message_id="id-404", **invalid),
        "id-1", "id-404",
    )  # fmt: skip
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    for policy in (0, 1, 2):  # plain, REPLACE, KEEP: each a send of billing's own
        mine = billing.send("billing.b", b"billing", delay_ms=HOUR_MS, message_id="id-1",
                            if_exists=policy)  # fmt: skip
        assert mine.message_id == "id-1"
    assert status_of(lambda: billing.send("billing.b", b"x", delay_ms=1, message_id="orders./id-1")
                     ).code == grpc.StatusCode.INVALID_ARGUMENT  # fmt: skip

    # A claim does not block: billing took "id-2" first, orders uses it too.
    billing.send("billing.b", b"first", delay_ms=HOUR_MS, message_id="id-2")
    assert (
        orders.send("orders.a", b"mine", delay_ms=HOUR_MS, message_id="id-2").message_id == "id-2"
    )
    again = orders.send("orders.a", b"mine", delay_ms=HOUR_MS, message_id="id-2")
    assert again.existed  # its own retry is still idempotent
    # REPLACE by the owner works, and touches only its own.
    orders.send("orders.a", b"replaced", delay_ms=HOUR_MS, message_id="id-2", if_exists=1)
    assert orders.get("id-2").body == b"replaced" and orders.get("id-2").message_id == "id-2"
    assert billing.get("id-2").body == b"first" and billing.get("id-2").topic == "billing.b"
    assert [m.message_id for m in orders.list("orders.a")[0]] == ["id-1", "id-2"]

    # Admin finds both, by the stored ids List shows it.
    ids = {m.message_id for m in admin.list("orders.a")[0] + admin.list("billing.b")[0]}
    assert ids == {"orders./id-1", "orders./id-2", "billing./id-1", "billing./id-2"}
    assert admin.get("orders./id-2").body == b"replaced"
    assert admin.get("billing./id-2").body == b"first"
    assert status_of(lambda: admin.get("id-2")).code == grpc.StatusCode.NOT_FOUND


def test_deliveries_show_and_ack_the_id_as_sent(scoped):
    start, client, _ = scoped
    server = start()
    orders, consumer = client(server, "orders"), client(server, "orders-consumer")
    orders.send("orders.due", b"now", delay_ms=0, message_id="due-1")
    with consumer.subscribe("orders.due") as subscription:
        batch = next(iter(subscription))
    assert [d.message_id for d in batch] == ["due-1"]
    assert consumer.ack("orders.due", ["due-1"]) == 1
    assert consumer.get("due-1").state == 3  # ACKED


def test_the_console_finds_both_tenants_timers(scoped):
    start, client, _ = scoped
    server = start(console_port=0)
    client(server, "orders").send("orders.a", b"o", delay_ms=HOUR_MS, message_id="same")
    client(server, "billing").send("billing.b", b"b", delay_ms=HOUR_MS, message_id="same")
    admin_token = f"admin-token-{'x' * 40}"
    for stored_id, topic in (("orders./same", "orders.a"), ("billing./same", "billing.b")):
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.console.port}/api/timer?id="
            + urllib.request.quote(stored_id, safe=""),
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            timer = json.loads(answer.read())["timer"]
        assert timer["topic"] == topic, timer


def test_a_store_written_before_scopes_keeps_its_ids(scoped, make_server):
    """The migration: none is needed. A store whose client ids were written unscoped (by a
    server without tokens, which stores exactly what the code before scopes stored)
    reopened with tokens: the owner reaches its ids as before, by the same id; another
    tenant neither sees them nor is blocked by them; a consumer acks what it is shown."""
    start, client, data_dir = scoped
    before = make_server(data_dir=data_dir)
    with TimerClient(before.target, timeout_s=WAIT_S) as plain:
        plain.send("orders.a", b"old", delay_ms=HOUR_MS, message_id="old-1")
        plain.send("orders.due", b"fires", delay_ms=0, message_id="old-2")
        assert plain.get("old-1").message_id == "old-1"  # no tokens: ids as sent
    before.stop(grace_s=1.0)

    server = start()
    orders, billing = client(server, "orders"), client(server, "billing")
    consumer, admin = client(server, "orders-consumer"), client(server, "admin")
    assert orders.get("old-1").body == b"old"
    _same_refusal(lambda: billing.get("old-1"), lambda: billing.get("nope"), "old-1", "nope")
    billing.send("billing.b", b"theirs", delay_ms=HOUR_MS, message_id="old-1")
    assert billing.get("old-1").topic == "billing.b"
    orders.send("orders.a", b"new", delay_ms=HOUR_MS, message_id="old-1", if_exists=1)
    assert orders.get("old-1").body == b"new"
    assert admin.get("old-1").body == b"new"  # still the unscoped id it was stored under
    assert [m.message_id for m in orders.list("orders.a")[0]] == ["/old-1"]
    with consumer.subscribe("orders.due") as subscription:
        batch = next(iter(subscription))
    assert [d.message_id for d in batch] == ["/old-2"]
    assert consumer.ack("orders.due", ["/old-2"]) == 1
    assert admin.get("old-2").state == 3


def test_search_and_bulk_cancel_see_the_ids_as_the_token_does(scoped):
    start, client, _ = scoped
    server = start()
    orders, billing, admin = (client(server, n) for n in ("orders", "billing", "admin"))
    for n in range(3):
        orders.send("orders.a", b"o", delay_ms=HOUR_MS, message_id=f"run-{n}")
        billing.send("billing.b", b"b", delay_ms=HOUR_MS, message_id=f"run-{n}")
    found = orders.list("orders.a", id_prefix="run-")[0]
    assert [m.message_id for m in found] == ["run-0", "run-1", "run-2"]
    cancelled = orders.bulk_cancel(pb.TimerFilter(topic="orders.a", id_prefix="run-1"))
    assert cancelled.cancelled == 1
    assert orders.get("run-1").state == 4 and billing.get("run-1").state == 1
    assert [m.message_id for m in admin.list("billing.b")[0]] == [
        "billing./run-0", "billing./run-1", "billing./run-2",
    ]  # fmt: skip


def test_a_tenants_series_and_its_occurrences_keep_their_ids(scoped):
    start, client, _ = scoped
    server = start()
    orders, consumer, billing = (
        client(server, n) for n in ("orders", "orders-consumer", "billing")
    )
    sent = orders.send("orders.s", b"x", message_id="tick", repeat=pb.Repeat(every_ms=100))
    assert sent.message_id == "tick"
    with consumer.subscribe("orders.s") as subscription:
        first = next(iter(subscription))[0]
    assert first.message_id.startswith("tick#"), first.message_id
    assert consumer.ack("orders.s", [first.message_id]) == 1
    assert orders.pause_series("tick").changed
    assert status_of(lambda: billing.pause_series("tick")).code == grpc.StatusCode.NOT_FOUND
    assert orders.resume_series("tick").changed


def test_stored_ids_may_carry_a_scope_and_client_ids_may_not():
    from timerwheel.wheels.domain import InvalidArgument
    from timerwheel.wheels.validation import (
        validate_client_id,
        validate_message_id,
        validate_message_ref,
        validate_message_refs,
    )

    assert validate_message_id("orders./x") == "orders./x"
    assert validate_message_ref("billing.,orders./s#3") == "billing.,orders./s#3"
    validate_message_refs(["orders./x", "~0123456789abcdef/y", "z"])
    for bad in ("a/b/c", "/x", "a/", "a b/x", "x" * 65 + "/y"):
        for validate in (validate_message_id, validate_message_ref):
            with pytest.raises(InvalidArgument):
                validate(bad)
    with pytest.raises(InvalidArgument, match="may hold only letters"):
        validate_client_id("orders./x")


def test_an_id_planted_in_a_scope_on_another_topic_is_not_the_tenants(scoped):
    """An unscoped token may send with a stored id; one in a tenant's scope but on a topic
    outside its prefixes is neither readable nor replaceable by the tenant."""
    start, client, _ = scoped
    server = start()
    orders, admin = client(server, "orders"), client(server, "admin")
    admin.send("billing.b", b"planted", delay_ms=HOUR_MS, message_id="orders./p-1")
    assert status_of(lambda: orders.get("p-1")).code == grpc.StatusCode.NOT_FOUND
    for policy in (0, 1, 2):
        refused = status_of(
            lambda p=policy: orders.send("orders.a", b"x", delay_ms=HOUR_MS, message_id="p-1",
                                         if_exists=p)
        )  # fmt: skip
        assert refused.code == grpc.StatusCode.ALREADY_EXISTS and "'p-1'" in refused.details
    assert admin.get("orders./p-1").body == b"planted"


def test_the_v1_fixture_store_written_before_scopes_keeps_its_ids(tmp_path, make_server):
    """The store `tests/fixtures/store-v1.tar.gz`, written by the code before scopes
    (4ca027b: client ids unscoped on `orders`), served with tokens: no migration runs,
    the tenant of `orders` reaches its ids by the same ids, a tenant of `billing.` neither
    sees nor is blocked by them, and a consumer acks the deliveries as it is shown them."""
    import tarfile
    from pathlib import Path

    fixture = Path(__file__).parent.parent / "fixtures" / "store-v1.tar.gz"
    with tarfile.open(fixture) as archive:
        archive.extractall(tmp_path, filter="data")
    roles = {"orders": ("producer", ["orders"]), "orders-consumer": ("consumer", ["orders"]),
             "billing": ("producer", ["billing."]), "admin": ("admin", [])}  # fmt: skip
    lines = []
    for name, (role, topics) in roles.items():
        lines += ["[[tokens]]", f'name = "{name}"', f'role = "{role}"', f'token = "{name}-t"']
        if topics:
            lines.append(f"topics = {json.dumps(topics)}")
    (tmp_path / "tokens.toml").write_text("\n".join(lines) + "\n")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(data_dir=str(tmp_path / "data"), security=security)

    def client(name: str) -> TimerClient:
        return TimerClient(server.target, timeout_s=WAIT_S, token=f"{name}-t")

    with client("orders") as orders, client("billing") as billing, \
            client("orders-consumer") as consumer, client("admin") as admin:  # fmt: skip
        for message_id in ("hour-1", "fired-1", "series-1"):
            timer = orders.get(message_id)
            assert (timer.message_id, timer.topic) == (message_id, "orders")
            _same_refusal(
                lambda m=message_id: billing.get(m), lambda: billing.get("absent"),
                message_id, "absent",
            )  # fmt: skip
        billing.send("billing.b", b"mine", delay_ms=HOUR_MS, message_id="hour-1")
        assert billing.get("hour-1").body == b"mine"
        assert admin.get("hour-1").body == b"body of hour-1"  # stored as it was
        assert admin.get("billing./hour-1").body == b"mine"
        shown: list[str] = []
        with consumer.subscribe("orders") as subscription:
            for batch in subscription:
                shown += [d.message_id for d in batch]
                if "/fired-1" in shown:
                    break
        assert all(m.startswith("/") for m in shown), shown  # unscoped ids, shown so
        assert consumer.ack("orders", shown) == len(set(shown))
        assert orders.get("fired-1").state == 3 and admin.get("fired-1").state == 3


def test_a_pinned_id_scope_is_shared_by_a_tenants_tokens_of_other_prefixes(scoped):
    """`id_scope` in the token file: a consumer of fewer prefixes than its producer, and a
    token whose prefixes changed, name the tenant's ids as sent; each still reaches only
    the ids on its own topics."""
    start, client, _ = scoped
    server = start()
    producer, consumer = client(server, "acme-producer"), client(server, "acme-consumer")
    refunds, admin = client(server, "acme-refunds"), client(server, "admin")
    producer.send("acme.orders.a", b"o", delay_ms=0, message_id="ord-1")
    producer.send("acme.invoices.a", b"i", delay_ms=HOUR_MS, message_id="inv-1")
    with consumer.subscribe("acme.orders.a") as subscription:
        assert [d.message_id for d in next(iter(subscription))] == ["ord-1"]
    assert consumer.ack("acme.orders.a", ["ord-1"]) == 1
    assert refunds.get("ord-1").state == 3  # another token of the tenant, same id
    assert admin.get("acme/inv-1").body == b"i"
    # inv-1 is on a topic acme-refunds may not use: absent to it, and not its to take.
    assert status_of(lambda: refunds.get("inv-1")).details == status_of(
        lambda: refunds.get("inv-404")
    ).details.replace("inv-404", "inv-1")
    refused = status_of(
        lambda: refunds.send("acme.refunds.a", b"r", delay_ms=HOUR_MS, message_id="inv-1")
    )
    assert refused.code == grpc.StatusCode.ALREADY_EXISTS


def test_the_token_file_checks_id_scope(tmp_path):
    from timerwheel.security.tokens import load_tokens
    from timerwheel.wheels.settings import SettingsError

    def table(extra: str, topics: str = 'topics = ["a."]'):
        path = tmp_path / "t.toml"
        path.write_text(
            f'[[tokens]]\nname = "n"\nrole = "producer"\ntoken = "x"\n{topics}\n{extra}\n'
        )
        return load_tokens(str(path))

    assert table('id_scope = "acme"').entries[0][1].id_scope == "acme"
    assert table("").entries[0][1].id_scope == ""
    for bad in ('id_scope = "a/b"', 'id_scope = "~x"', "id_scope = 3", f'id_scope = "{"x" * 65}"'):
        with pytest.raises(SettingsError, match="id_scope"):
            table(bad)
    with pytest.raises(SettingsError, match="applies to a token with topics"):
        table('id_scope = "acme"', topics="")


def test_a_cluster_list_merges_a_scoped_tokens_pages_by_stored_id():
    """Scatter-gather merges the nodes' List pages by (deliver time, id) below their
    continuation keys, which are of stored ids; a scoped token's pages show ids without
    the scope, so the merge keys them by the stored id again."""
    from timerwheel.security.scopes import set_call_scope
    from timerwheel.server.scatter import _merge_list
    from timerwheel.store import keys

    def page(timers, after=None) -> pb.ListResponse:
        token = keys.encode_page_token(keys.wheel_key(*after)) if after else ""
        messages = [pb.TimerMessage(deliver_at_ms=t, message_id=i) for t, i in timers]
        return pb.ListResponse(messages=messages, next_page_token=token)

    # Stored: orders./a, orders./c (shown a, c) and the unscoped Z (shown /Z), all at 5;
    # the other node stopped at (5, "orders./b"): orders./a and Z sort below it, orders./c
    # beyond it (waits for the next page), though its shown "c" sorts below "orders./b".
    pages = [page([(5, "a"), (5, "c"), (5, "/Z")]), page([], after=(5, "orders./b"))]
    set_call_scope(("orders.",))
    try:
        merged = _merge_list(pages, limit=10)
    finally:
        set_call_scope(())
    assert [m.message_id for m in merged.messages] == ["/Z", "a"]
    assert keys.decode_page_token(merged.next_page_token) == keys.wheel_key(5, "orders./b")
