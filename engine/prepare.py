"""Sends made ready to write, in the caller's thread or process (a gRPC thread, a worker):
validated, ids chosen, records encoded, so the single writer's per-timer work stays small.
"""

from __future__ import annotations

from timerwheel.engine.ids import MessageIds
from timerwheel.engine.send_op import SendOp
from timerwheel.store import extras as extras_cf
from timerwheel.store import records
from timerwheel.store.records import encode_new_many
from timerwheel.wheels.domain import InvalidArgument, SendSpec
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import validate_sends


def prepare_sends(
    specs: list[SendSpec], now_ms: int, settings: Settings, ids: MessageIds
) -> SendOp:
    """Sends made ready to write: validated, ids chosen, records encoded, column by column.

    Pure work of the caller (a gRPC thread, or a worker process), so the writer's per-timer
    work stays small; raises InvalidArgument naming the message and field.
    """
    if len(specs) > settings.max_batch_messages:
        raise InvalidArgument(
            "messages", f"<{len(specs)} messages>",
            f"at most {settings.max_batch_messages} per batch",
        )  # fmt: skip
    deliver_times_ms = validate_sends(specs, now_ms, settings)
    client_ids = any(spec.message_id for spec in specs)
    message_ids = ids.take(deliver_times_ms)
    if client_ids:
        message_ids = [s.message_id or made for s, made in zip(specs, message_ids, strict=True)]
    op = SendOp(
        specs=specs, message_ids=message_ids, deliver_times_ms=deliver_times_ms,
        records=encode_new_many(specs, deliver_times_ms, now_ms),
        topics=[spec.topic for spec in specs], client_ids=client_ids,
    )  # fmt: skip
    with_options = [index for index, spec in enumerate(specs) if spec.options]
    if with_options:  # flagged records, and their `extras` entries (timerwheel.store.records)
        op.extras = [None] * len(specs)
        for index in with_options:
            options = specs[index].options
            series = options.repeat is not None
            op.records[index] = records.with_extras_flag(op.records[index], series)
            op.extras[index] = extras_cf.encode_extras(options, 1, deliver_times_ms[index])
    return op
