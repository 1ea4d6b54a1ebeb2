"""timerwheel.engine.send_op: what a send operation carries from a worker process to the
engine's."""

from __future__ import annotations

import pickle

import pytest

from timerwheel.common import SendResult, State
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.wheels.domain import NO_PROPERTIES, IfExists, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

NOW_MS = 1_700_000_000_000


def test_a_send_op_crosses_processes_with_every_spec_as_it_was(tmp_path):
    specs = [
        SendSpec("orders", b"plain", When(WhenKind.DELAY, 5_000)),
        SendSpec("orders", b"with", When(WhenKind.DELIVER_AT, NOW_MS + 9), {"k": "v"}, "id-1"),
        SendSpec("audit", b"lvl", When(WhenKind.LEVEL, 3), {}, "id-2", IfExists.REPLACE),
    ]
    op = prepare_sends(specs, NOW_MS, Settings(data_dir=str(tmp_path)), MessageIds())

    copy = pickle.loads(pickle.dumps(op))

    assert copy.specs == specs
    assert [type(spec.when.kind) for spec in copy.specs] == [WhenKind] * 3
    assert copy.specs[2].if_exists is IfExists.REPLACE
    assert copy.specs[0].properties is NO_PROPERTIES  # none sent, the shared empty one back
    assert (copy.message_ids, copy.deliver_times_ms, copy.records) == (
        op.message_ids, op.deliver_times_ms, op.records,
    )  # fmt: skip
    assert not copy.future.done() and copy.future is not op.future


def test_an_op_of_server_made_ids_crosses_without_its_specs(tmp_path):
    """The engine needs only the columns and each topic: every body crosses once, in its
    record, and the writer's weight and topics are as they were."""
    specs = [SendSpec(f"t{i % 2}", f"body-{i:03}".encode(), When(WhenKind.DELAY, 5_000))
             for i in range(50)]  # fmt: skip
    op = prepare_sends(specs, NOW_MS, Settings(data_dir=str(tmp_path)), MessageIds())

    wire = pickle.dumps(op)
    copy = pickle.loads(wire)

    assert all(wire.count(spec.body) == 1 for spec in specs)
    assert copy.specs == []
    assert (copy.weight, copy.topics, copy.records) == (50, op.topics, op.records)
    assert [send.topic for send in copy.prepared()] == [spec.topic for spec in specs]


def test_results_of_server_made_ids_cross_back_as_nothing_and_are_made_again(tmp_path):
    """The engine answers an op of server-made ids with None (`SendOp.packed_results`):
    the worker holds the ids and times it prepared, which are the results."""
    settings = Settings(data_dir=str(tmp_path))
    specs = [SendSpec("t", b"x", When(WhenKind.DELAY, 5_000 + i)) for i in range(3)]
    made = prepare_sends(specs, NOW_MS, settings, MessageIds())
    stored = made.results_as_prepared()

    assert made.packed_results(stored) is None
    assert made.unpacked_results(None) == stored
    assert [(r.message_id, r.deliver_at_ms) for r in stored] == list(
        zip(made.message_ids, made.deliver_times_ms, strict=True)
    )
    assert [r.existed for r in stored] == [False] * 3


def test_results_of_a_clients_ids_cross_back_as_they_are(tmp_path):
    """With a client's id a send may find its id taken (an idempotent retry): the
    engine's results differ from the prepared ones and cross back whole."""
    specs = [SendSpec("t", b"x", When(WhenKind.DELAY, 5_000), message_id="mine")]
    op = prepare_sends(specs, NOW_MS, Settings(data_dir=str(tmp_path)), MessageIds())
    retried = [SendResult("mine", NOW_MS + 1, existed=True, existing_state=State.FIRED)]

    assert op.packed_results(retried) is retried
    assert op.unpacked_results(retried) is retried


def test_specs_are_immutable():
    spec = SendSpec("orders", b"x", When(WhenKind.DELAY, 1))
    with pytest.raises(AttributeError):
        spec.topic = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        spec.when.value = 2  # type: ignore[misc]
    assert spec.properties == {} and not spec.properties
    with pytest.raises(TypeError):
        spec.properties["k"] = "v"  # type: ignore[index]  # the shared empty mapping
