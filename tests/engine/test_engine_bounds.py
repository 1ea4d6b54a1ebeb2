"""The engine's resource bounds over real RocksDB: List pages by bytes, Ack ids per call."""

from __future__ import annotations

import pytest
from helpers.engines import T0, engine_factory

from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import InvalidArgument, SendSpec, When, WhenKind
from timerwheel.wheels.settings import MINUTE_MS

KIB = 1024


@pytest.fixture
def clock():
    return VirtualClock(T0)


@pytest.fixture
def make_engine(tmp_path, clock):
    with engine_factory(tmp_path / "data", clock) as make:
        yield make


def send_bodies(engine: Engine, count: int, body_bytes: int) -> list[str]:
    specs = [
        SendSpec("orders", bytes([n]) * body_bytes, When(WhenKind.DELAY, 1_000 + n))
        for n in range(count)
    ]
    return [result.message_id for result in engine.send_batch(specs)]


def test_a_list_page_stops_at_its_byte_budget_and_the_token_continues(make_engine):
    engine = make_engine(max_list_bytes=100 * KIB)
    ids = send_bodies(engine, 10, 30 * KIB)
    pages, token = [], ""
    while True:
        page, token = engine.list_pending("orders", T0, T0 + MINUTE_MS, 100, token, True)
        pages.append(page)
        if not token:
            break
    assert [len(page) for page in pages] == [3, 3, 3, 1]  # 4 x 30 KiB would pass 100 KiB
    listed = [timer for page in pages for timer in page]
    assert [t.message_id for t in listed] == ids
    assert all(t.body == bytes([n]) * 30 * KIB for n, t in enumerate(listed))


def test_without_bodies_a_page_is_not_cut_by_them(make_engine):
    engine = make_engine(max_list_bytes=100 * KIB)
    ids = send_bodies(engine, 10, 30 * KIB)
    page, token = engine.list_pending("orders", T0, T0 + MINUTE_MS, 100, "", False)
    assert [t.message_id for t in page] == ids and token == ""
    assert {t.body for t in page} == {b""}


def test_one_timer_larger_than_the_budget_still_comes_alone(make_engine):
    engine = make_engine(max_list_bytes=10 * KIB)
    ids = send_bodies(engine, 2, 30 * KIB)
    first, token = engine.list_pending("orders", T0, T0 + MINUTE_MS, 100, "", True)
    second, end = engine.list_pending("orders", T0, T0 + MINUTE_MS, 100, token, True)
    assert [t.message_id for t in first + second] == ids and end == ""


def test_an_ack_with_too_many_ids_is_refused_and_changes_nothing(make_engine):
    engine = make_engine(max_ack_ids=100)
    [message_id] = send_bodies(engine, 1, 10)
    with pytest.raises(InvalidArgument, match=r"message_ids='<101 ids>': at most 100 per Ack"):
        engine.ack("orders", [message_id] * 101)
    assert engine.queued_ops() == 0
    assert engine.ack("orders", ["unknown"] * 100) == []
