"""Who takes a partition whose preferred owner lost its lease (cluster/placement.py): its
warm standby after one renewal interval (the owner, if alive, retakes it within a tick),
any other node after the grace; and no hand-off back to that owner
while only a registry entry read before the take lists it. Pure: a fake clock and a fake
node bucket, no NATS."""

from __future__ import annotations

import asyncio

from timerwheel.cluster.placement import Placement

NODES = {"n1", "n2", "n3"}
GRACE_MS = 3_000
RENEW_MS = 1_000


class FakeNodes:
    """The node bucket: the names it lists, or an error while NATS elects its leader."""

    def __init__(self, names: set[str]) -> None:
        self.names = set(names)
        self.failing = False

    async def put(self, name: str, value: bytes) -> None:
        if self.failing:
            raise TimeoutError("no leader")
        self.names.add(name)

    async def keys(self) -> list[str]:
        if self.failing:
            raise TimeoutError("no leader")
        return sorted(self.names)


def node(name: str, registry: FakeNodes, now_ms: int = 0) -> Placement:
    made = Placement(name, renew_every_ms=RENEW_MS, grace_ms=GRACE_MS)
    register(made, registry, now_ms)
    return made


def register(placement: Placement, registry: FakeNodes, now_ms: int) -> None:
    asyncio.run(placement.register(registry, "addr", now_ms))


def setting() -> tuple[int, str, str, str]:
    """A partition, its preferred node, its standby after that node, and the third."""
    probe = Placement("probe", RENEW_MS, GRACE_MS)
    probe.live_nodes = set(NODES)
    partition = 0
    owner = probe.preferred(partition)
    standby = probe.standby(partition, owner)
    (third,) = NODES - {owner, standby}
    return partition, owner, standby, third


def test_the_warm_standby_takes_after_a_renewal_when_the_preferred_owner_lost_it():
    partition, owner, standby, third = setting()
    registry = FakeNodes(NODES)
    warm, other = node(standby, registry), node(third, registry)
    for placement in (warm, other):
        placement.owner_seen(partition, owner)  # read while the owner held it
        placement.read(partition, owner_found=False, now_ms=10_000)  # then it expired
    assert warm.preferred(partition) == owner  # the lost owner is still listed
    assert not warm.may_take(partition, 10_000 + RENEW_MS - 1)  # the owner's turn first
    assert warm.may_take(partition, 10_000 + RENEW_MS)
    assert not other.may_take(partition, 10_000 + RENEW_MS)
    assert not other.may_take(partition, 10_000)
    assert not other.may_take(partition, 10_000 + GRACE_MS - 1)
    assert other.may_take(partition, 10_000 + GRACE_MS)


def test_no_warm_take_from_an_owner_that_is_not_the_preferred_node():
    """After a hand-off the partition's old owner is not its preferred node: the preferred
    node takes it, nobody else races it before the grace."""
    partition, preferred, standby, third = setting()
    registry = FakeNodes(NODES)
    others = [node(standby, registry), node(third, registry)]
    for placement in others:
        placement.owner_seen(
            partition, next(n for n in NODES if n != preferred and n != placement.name)
        )
        placement.read(partition, owner_found=False, now_ms=10_000)
        assert not placement.may_take(partition, 10_000)
        assert placement.may_take(partition, 10_000 + GRACE_MS)
    assert node(preferred, registry).may_take(partition, 10_000)


def test_a_node_that_handed_a_partition_off_does_not_take_it_back_warm():
    partition, owner, standby, _ = setting()
    registry = FakeNodes(NODES)
    giver = node(standby, registry)
    giver.owner_seen(partition, owner)
    giver.read(partition, owner_found=False, now_ms=10_000)
    assert giver.may_take(partition, 11_000)
    giver.held(partition)
    giver.handing_off(20_000)
    giver.handed_off(partition, 20_000)
    giver.read(partition, owner_found=False, now_ms=20_000)
    assert not giver.may_take(partition, 20_000 + RENEW_MS)
    assert not giver.may_take(partition, 20_000 + GRACE_MS - 1)


def test_no_hand_off_back_to_a_lost_owner_its_stale_entry_still_lists():
    partition, owner, standby, _ = setting()
    registry = FakeNodes(NODES)
    taker = node(standby, registry, now_ms=0)
    taker.owner_seen(partition, owner)
    taker.read(partition, owner_found=False, now_ms=10_000)
    assert taker.may_take(partition, 11_000)
    taker.held(partition)
    # The owner has been listed since 0: before the take that made it "up" long ago.
    assert not taker.should_hand_off(partition, 11_000)
    registry.failing = True  # NATS electing the bucket's leader: the old list stays
    for now in range(11_000, 30_000, RENEW_MS):
        register(taker, registry, now)
        assert taker.preferred(partition) == owner
        assert not taker.should_hand_off(partition, now), now


def test_a_lost_owner_gone_from_the_registry_never_gets_it_back():
    partition, owner, standby, _ = setting()
    registry = FakeNodes(NODES)
    taker = node(standby, registry)
    taker.owner_seen(partition, owner)
    taker.read(partition, owner_found=False, now_ms=10_000)
    assert taker.may_take(partition, 11_000)
    taker.held(partition)
    registry.names.discard(owner)  # its entry expired
    for now in range(12_000, 30_000, RENEW_MS):
        register(taker, registry, now)
        assert taker.preferred(partition) == standby
        assert not taker.should_hand_off(partition, now)


def test_an_owner_back_gets_its_partition_after_the_grace_once_listed_again():
    partition, owner, standby, _ = setting()
    registry = FakeNodes(NODES)
    taker = node(standby, registry)
    taker.owner_seen(partition, owner)
    taker.read(partition, owner_found=False, now_ms=10_000)
    assert taker.may_take(partition, 11_000)
    taker.held(partition)
    register(taker, registry, 12_000)  # still listed (alive, or its entry not yet expired)
    assert not taker.should_hand_off(partition, 12_000 + GRACE_MS - 1)
    assert taker.should_hand_off(partition, 12_000 + GRACE_MS)


def test_an_owner_that_renewed_late_retakes_its_partition_first():
    """Alive, the preferred owner reads the lease absent and creates it again within a
    tick: before its standby may."""
    partition, owner, standby, _ = setting()
    registry = FakeNodes(NODES)
    back, warm = node(owner, registry), node(standby, registry)
    warm.owner_seen(partition, owner)
    warm.read(partition, owner_found=False, now_ms=10_000)
    back.read(partition, owner_found=False, now_ms=10_000)
    assert back.may_take(partition, 10_000)
    assert not warm.may_take(partition, 10_000 + RENEW_MS // 2)


def test_a_take_from_a_lost_owner_does_not_ping_pong():
    """Three nodes in a fake clock: the owner dies with its entry still listed until 13 s.
    The standby takes it a renewal after its lease expired and keeps it; no hand-off goes
    to the dead node."""
    partition, owner, standby, third = setting()
    registry = FakeNodes(NODES)
    nodes = {name: node(name, registry) for name in (standby, third)}
    holder: str | None = owner
    for placement in nodes.values():
        placement.owner_seen(partition, owner)
    moves = []
    for now in range(10_000, 40_000, RENEW_MS // 2):
        if now == 13_000:
            registry.names.discard(owner)
        for name, placement in nodes.items():
            if now % RENEW_MS == 0:
                register(placement, registry, now)
            if holder == owner and now >= 10_000:
                holder = None  # the dead owner's lease expired at 10 s
            if holder is None:
                placement.read(partition, owner_found=False, now_ms=now)
                if placement.may_take(partition, now):
                    holder = name
                    placement.held(partition)
                    moves.append((now, name))
            elif holder == name:
                placement.held(partition)
                if placement.should_hand_off(partition, now):
                    placement.handing_off(now)
                    placement.handed_off(partition, now)
                    holder = None
                    moves.append((now, "handed off"))
            else:
                placement.owner_seen(partition, holder)
    assert moves == [(10_000 + RENEW_MS, standby)]
