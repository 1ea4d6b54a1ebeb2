"""The order of a rolling upgrade, enforced (docs/cluster.md, "Upgrading a cluster"): each
node's registry entry names its build's log version (cluster/placement.py), and while any
live node is of an older build, a recurring series (logged in version-2 records, which
such a node refuses) is refused with FAILED_PRECONDITION naming those nodes; one-shot
sends go on. A build from before the entry had a version put its address alone.

The node bucket is an in-memory twin here (put, keys, get, as nats-py's KeyValue); the
engine is real, on RocksDB."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from helpers.engines import T0, engine_factory

from timerwheel.cluster import journal
from timerwheel.cluster.api import ClusterApi
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.placement import Placement, registry_value, registry_version
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import (
    FailedPrecondition,
    NotFound,
    Repeat,
    SendOptions,
    SendSpec,
    When,
    WhenKind,
)


@dataclass
class _Entry:
    value: bytes


class _Registry:
    def __init__(self, entries: dict[str, bytes]) -> None:
        self.entries = entries

    async def put(self, key: str, value: bytes) -> None:
        self.entries[key] = value

    async def keys(self) -> list[str]:
        return list(self.entries)

    async def get(self, key: str) -> _Entry:
        return _Entry(self.entries[key])


def test_registry_entries_name_their_log_version_and_an_old_one_reads_as_1():
    assert registry_version(registry_value("10.0.0.1:7070", 2)) == 2
    assert registry_version(b"10.0.0.1:7070") == 1  # a build from before the version
    assert registry_version(b"") == 1


def test_a_live_node_of_an_older_build_is_named_until_it_is_upgraded_or_gone():
    registry = _Registry({"n2": b"10.0.0.2:7070", "n3": registry_value("10.0.0.3:7070", 2)})
    placement = Placement("n1", renew_every_ms=1_000, grace_ms=3_000)

    asyncio.run(placement.register(registry, "10.0.0.1:7070", 0, log_version=2))
    assert placement.live_nodes == {"n1", "n2", "n3"}
    assert placement.older_nodes(2) == ["n2"]
    assert placement.older_nodes(1) == []

    registry.entries["n2"] = registry_value("10.0.0.2:7070", 2)  # restarted on the new build
    asyncio.run(placement.register(registry, "10.0.0.1:7070", 1_000, log_version=2))
    assert placement.older_nodes(2) == []

    registry.entries["n2"] = b"10.0.0.2:7070"
    asyncio.run(placement.register(registry, "10.0.0.1:7070", 2_000, log_version=2))
    del registry.entries["n2"]  # gone from the registry (its TTL)
    asyncio.run(placement.register(registry, "10.0.0.1:7070", 3_000, log_version=2))
    assert placement.older_nodes(2) == []


class _LaggingRegistry(_Registry):
    """Lists a key a replica has not yet applied: its get answers "not found" (a direct
    get that any replica may answer)."""

    def __init__(self, entries: dict[str, bytes], unapplied: set[str]) -> None:
        super().__init__(entries)
        self.unapplied = unapplied

    async def get(self, key: str) -> _Entry:
        if key in self.unapplied:
            raise KeyError(key)
        return await super().get(key)


def test_a_key_no_replica_returns_yet_leaves_the_other_nodes_read():
    registry = _LaggingRegistry(
        {"n2": registry_value("10.0.0.2:7070", 2), "n3": b"10.0.0.3:7070"}, unapplied={"n2"}
    )
    placement = Placement("n1", renew_every_ms=1_000, grace_ms=3_000)
    asyncio.run(placement.register(registry, "10.0.0.1:7070", 0, log_version=2))
    assert placement.live_nodes == {"n1", "n2", "n3"}
    assert placement.older_nodes(2) == ["n3"]  # read although n2 (sorted first) failed


def _spec(repeat: bool) -> SendSpec:
    options = SendOptions(repeat=Repeat(every_ms=60_000)) if repeat else None
    at = When(WhenKind.DELIVER_AT, T0 + 3_600_000)
    return SendSpec("orders", b"tick", at, {}, "s-1" if repeat else "o-1", options=options)


def test_a_series_is_refused_while_an_older_node_is_live(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        engine = make()
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 4), engine)
        node.placement.live_nodes = {"n1", "n2"}
        node.placement.log_versions = {"n1": journal.VERSION, "n2": 1}
        api = ClusterApi(node)

        with pytest.raises(FailedPrecondition) as refused:
            api.send_batch_async([_spec(repeat=True)])
        said = str(refused.value)
        assert "options.repeat" in said and "n2" in said and "upgrade" in said
        with pytest.raises(NotFound):  # nothing stored
            engine.get("s-1")

        node.placement.log_versions["n2"] = journal.VERSION
        # past the check: now the partition's ownership decides (this node owns none)
        with pytest.raises(Exception) as next_refusal:
            api.send_batch_async([_spec(repeat=True)])
        assert not isinstance(next_refusal.value, FailedPrecondition)
