"""The access attacks of issue 11, each tried against a token-protected server.

Each probe is what an attacker holding some token (or none) would try; the table gives
the status it must get. After all of them, nothing the victim stored has changed and
nothing was written outside the export root. Loopback, tokens, no TLS (TLS itself is
tests/security/test_security.py's): the client sends its token over grpcio's local credentials.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import pytest
from helpers.credentials import write_tokens
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.client import RemoteError, TimerClient
from timerwheel.common import State
from timerwheel.security.settings import SecuritySettings
from timerwheel.server.app import TimerServer
from timerwheel.wheels.settings import Settings

OK = grpc.StatusCode.OK


@dataclass
class World:
    server: TimerServer
    clients: dict[str, TimerClient]  # token name (or "none", "wrong") -> client
    root: str  # the export root
    outside: str  # a folder outside the root that must stay untouched
    scheduled: str  # the victim's pending message id
    fired: str  # the victim's fired, un-acked message id

    @property
    def unscoped(self) -> str:
        """The victim's client id as a token with topic prefixes names it: the victim's
        token has none, so it is unscoped (`/v-1`; plain `v-1` is the token's own)."""
        return "/" + self.scheduled

    def export_refusal(self, out_dir: str) -> str:
        return _code_and_details(lambda: self.clients["admin"].export(out_dir))[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("attack")
    tokens = write_tokens(base / "tokens.toml")
    root, outside = base / "exports", base / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "link")  # an operator's link that leads out of the root
    security = SecuritySettings(
        auth_tokens_file=str(base / "tokens.toml"), export_root=str(root), export_reserve_bytes=0
    )
    settings = Settings(data_dir=str(base / "data"), port=0, sync_writes=False)
    server = TimerServer(settings, security=security).start()
    tokens = {**tokens, "none": None, "wrong": "0" * 64}
    clients = {
        name: TimerClient(server.target, timeout_s=WAIT_S, token=token)
        for name, token in tokens.items()
    }
    try:
        victim = clients["producer"]
        scheduled = victim.send("victim.q", b"secret", delay_ms=3_600_000, message_id="v-1")
        fired = victim.send("victim.fired", b"due", delay_ms=0)
        # The victim's next message: with a counter, its id would be `fired`'s plus one.
        victim.send("victim.q", b"later secret", delay_ms=3_600_000)
        yield World(server, clients, str(root), str(outside), scheduled.message_id,
                    fired.message_id)  # fmt: skip
    finally:
        for client in clients.values():
            client.close()
        server.stop(grace_s=1.0)


def _code_and_details(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except RemoteError as exc:
        return exc.code, exc.details
    return OK, ""


def _neighbours(message_id: str) -> list[str]:
    """Ids a counter-based scheme would have given just before and after this one."""
    value = int(message_id, 16)
    return [f"{value + step:032X}" for step in (-2, -1, 1, 2)]


def _guess_neighbours(client: TimerClient, message_id: str) -> None:
    """Get every neighbour; return (OK) if any is found, else raise the last NOT_FOUND."""
    refusals = []
    for guess in _neighbours(message_id):
        try:
            client.get(guess)
            return
        except RemoteError as exc:
            refusals.append(exc)
    raise refusals[-1]


def _first_batch(client: TimerClient, topic: str) -> None:
    with client.subscribe(topic) as subscription:
        next(iter(subscription))


def _raw_get(world: World, raw: bytes) -> None:
    channel = world.clients["admin"].channel
    try:
        channel.unary_unary("/timerwheel.v1.TimerService/Get")(raw, timeout=WAIT_S)
    except grpc.RpcError as error:
        raise RemoteError.of(error) from None


def _ack_nothing(client: TimerClient, topic: str, message_id: str) -> None:
    """The Ack is allowed (own topic) but must retire nothing of another topic."""
    assert client.ack(topic, [message_id]) == 0


def _export_twice(world: World) -> None:
    with world.server.engine.export_slot.take():  # the first export, still running
        world.clients["admin"].export("second")


# (probe, token used, what it does, expected status)
PROBES: list[tuple[str, str, Callable[[World, TimerClient], object], grpc.StatusCode]] = [
    ("predict the next id", "producer",
     lambda w, c: _guess_neighbours(c, w.fired), grpc.StatusCode.NOT_FOUND),
    ("read another topic's message", "orders-producer",
     lambda w, c: c.get(w.unscoped), grpc.StatusCode.NOT_FOUND),
    ("read it with a consumer token", "orders-consumer",
     lambda w, c: c.get(w.fired), grpc.StatusCode.NOT_FOUND),
    ("cancel another topic's message", "orders-producer",
     lambda w, c: c.cancel(w.unscoped), grpc.StatusCode.NOT_FOUND),
    ("cancel as a consumer", "consumer",
     lambda w, c: c.cancel(w.scheduled), grpc.StatusCode.PERMISSION_DENIED),
    ("ack another topic's deliveries", "orders-consumer",
     lambda w, c: c.ack("victim.fired", [w.fired]), grpc.StatusCode.PERMISSION_DENIED),
    ("ack them through an own topic", "orders-consumer",
     lambda w, c: _ack_nothing(c, "orders.mine", w.fired), OK),
    ("ack as a producer", "producer",
     lambda w, c: c.ack("victim.fired", [w.fired]), grpc.StatusCode.PERMISSION_DENIED),
    ("subscribe to another topic", "orders-consumer",
     lambda w, c: _first_batch(c, "victim.fired"), grpc.StatusCode.PERMISSION_DENIED),
    ("subscribe as a producer", "producer",
     lambda w, c: _first_batch(c, "victim.fired"), grpc.StatusCode.PERMISSION_DENIED),
    ("send without a token", "none",
     lambda w, c: c.send("victim.q", b"x", delay_ms=1), grpc.StatusCode.UNAUTHENTICATED),
    ("read with a made-up token", "wrong",
     lambda w, c: c.get(w.scheduled), grpc.StatusCode.UNAUTHENTICATED),
    # Client ids are scoped per token (decision 0012): these store the attacker's own
    # orders./v-1 and leave the victim's v-1 as it was (below), telling nothing of it.
    ("reuse the victim's client id", "orders-producer",
     lambda w, c: c.send("orders.x", b"y", delay_ms=3_600_000, message_id="v-1"), OK),
    ("overwrite it with if_exists REPLACE", "orders-producer",
     lambda w, c: c.send("orders.x", b"y", delay_ms=3_600_000, message_id="v-1", if_exists=1),
     OK),
    ("read its time with if_exists KEEP", "orders-producer",
     lambda w, c: c.send("orders.x", b"y", delay_ms=3_600_000, message_id="v-1", if_exists=2),
     OK),
    ("move another topic's message", "orders-producer",
     lambda w, c: c.reschedule(w.unscoped, delay_ms=1), grpc.StatusCode.NOT_FOUND),
    ("dead-letter into another topic", "orders-producer",
     lambda w, c: c.send("orders.x", b"y", delay_ms=1, dead_letter_topic="victim.fired"),
     grpc.StatusCode.PERMISSION_DENIED),
    ("nack another topic's deliveries", "orders-consumer",
     lambda w, c: c.nack("victim.fired", [w.fired]), grpc.StatusCode.PERMISSION_DENIED),
    ("export as a producer", "producer",
     lambda w, c: c.export("mine"), grpc.StatusCode.PERMISSION_DENIED),
    ("stats as a consumer", "consumer", lambda w, c: c.stats(), grpc.StatusCode.PERMISSION_DENIED),
    ("export to /tmp/x", "admin",
     lambda w, c: c.export(os.path.join(w.outside, "x")), grpc.StatusCode.INVALID_ARGUMENT),
    ("export to ..", "admin",
     lambda w, c: c.export("../outside/x"), grpc.StatusCode.INVALID_ARGUMENT),
    ("export to a/../../x", "admin",
     lambda w, c: c.export("a/../../outside/x"), grpc.StatusCode.INVALID_ARGUMENT),
    ("export to an absolute path", "admin",
     lambda w, c: c.export("/etc"), grpc.StatusCode.INVALID_ARGUMENT),
    ("export through a link out of the root", "admin",
     lambda w, c: c.export("link/x"), grpc.StatusCode.INVALID_ARGUMENT),
    ("export onto the link itself", "admin",
     lambda w, c: c.export("link"), grpc.StatusCode.INVALID_ARGUMENT),
    ("export while an export runs", "admin",
     lambda w, c: _export_twice(w), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ("a non-UTF-8 id", "admin",
     lambda w, c: _raw_get(w, b"\x0a\x02\xff\xfe"), grpc.StatusCode.INVALID_ARGUMENT),
]  # fmt: skip


@pytest.mark.parametrize(("probe", "who", "attack", "expected"), PROBES, ids=[p[0] for p in PROBES])
def test_attack_is_refused(world, probe, who, attack, expected):
    code, details = _code_and_details(lambda: attack(world, world.clients[who]))
    assert code == expected, f"{probe}: {code.name}: {details}"
    for secret in ("secret", "victim.q", "0" * 64):
        assert secret not in details  # no content of another's message, no token


def test_export_refusals_do_not_tell_what_exists(world):
    """The same words for a path that exists, one that does not, and a file."""
    messages = {
        name: world.export_refusal(name).replace(repr(name), "<out_dir>")
        for name in ("/etc", "/etc/passwd", "/no/such/dir", "../outside", "link/x")
    }
    assert len(set(messages.values())) == 1, messages


def test_nothing_was_stored_or_written_by_the_attacks(world):
    admin = world.clients["admin"]
    for probe in PROBES:  # run here too, so this test stands on its own
        _code_and_details(lambda probe=probe: probe[2](world, world.clients[probe[1]]))
    victim = admin.get(world.scheduled, include_body=True)
    assert (victim.state, victim.body, victim.topic) == (State.SCHEDULED, b"secret", "victim.q")
    assert admin.get(world.fired).state == State.FIRED  # nobody acked it
    assert len(admin.list("victim.q")[0]) == 2  # v-1 and the later one, both pending
    assert admin.list("orders.mine")[0] == []
    # Only the attacker's own timer, in its own scope.
    assert [m.message_id for m in admin.list("orders.x")[0]] == ["orders./v-1"]
    assert os.listdir(world.outside) == []
    assert sorted(os.listdir(world.root)) == ["link"]
    collector = Collector(admin, "victim.fired")  # the rightful consumer still gets it
    try:
        assert [d.message_id for d in collector.wait_count(1)] == [world.fired]
    finally:
        collector.stop()
