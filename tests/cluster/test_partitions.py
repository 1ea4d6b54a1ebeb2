"""Partition of an id (cluster/partitions.py): stable, the same on every node, and what a
cluster-made id names; the single node's ids keep routing by their hash."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.cluster.partitions import (
    check_partition_count,
    named_partition,
    partition_of,
    with_partition,
)
from timerwheel.engine.ids import MessageIds

client_ids = st.from_regex(r"[A-Za-z0-9_.:@-]{1,40}", fullmatch=True)


@given(client_ids, st.integers(1, 4096))
def test_a_client_id_goes_to_its_crc32_mod_the_count(message_id, count):
    if named_partition(message_id) is None:
        assert partition_of(message_id, count) == zlib.crc32(message_id.encode()) % count


def test_the_hash_is_pinned():
    """A cluster's partitions must not move when Python or the machine changes."""
    assert partition_of("order-1", 64) == zlib.crc32(b"order-1") % 64 == 47


@given(st.integers(0, 63))
def test_a_cluster_made_id_carries_its_partition(partition):
    [server_id] = MessageIds().take([1_700_000_000_000])
    made = with_partition(server_id, partition)
    assert made.startswith(server_id)  # still begins with its deliver time
    assert partition_of(made, 64) == partition == named_partition(made)
    assert partition_of(f"{made}#12", 64) == partition  # an occurrence of a series


def test_a_single_node_id_routes_by_its_hash():
    [server_id] = MessageIds().take([1_700_000_000_000])
    assert named_partition(server_id) is None
    assert partition_of(server_id, 64) == zlib.crc32(server_id.encode()) % 64


def test_an_occurrence_goes_where_its_series_is():
    assert partition_of("daily-report#3", 64) == partition_of("daily-report", 64)


def test_a_named_partition_beyond_the_count_falls_back_to_the_hash():
    made = with_partition("0" * 32, 100)
    assert partition_of(made, 64) == zlib.crc32(made.encode()) % 64
    padded = "0" * 32 + ".p017"  # not canonical: one partition, one spelling
    assert named_partition(padded) is None


def test_the_count_is_bounded():
    assert check_partition_count(64) == 64
    with pytest.raises(ValueError, match="partition count 0"):
        check_partition_count(0)
