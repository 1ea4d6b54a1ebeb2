"""BulkCancel, Purge and Redrive as the engine runs them: candidates found on the
caller's thread (timerwheel.store.bulk), then one writer operation a page
(timerwheel.engine.bulk_ops), which checks each candidate again as its batch leaves it.
What a purge or a redrive takes out of the fired backlog is counted as an ack would be
(timerwheel.engine.backlog).
"""

from __future__ import annotations

from timerwheel.engine.backlog import Backlog
from timerwheel.engine.bulk_ops import BulkCancelOp, RedriveOp
from timerwheel.engine.lookups import TimerLookups
from timerwheel.engine.writer import Writer
from timerwheel.store import bulk as bulk_cf
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.bulk import (
    BULK_SCAN_BUDGET,
    BulkResult,
    RedriveResult,
    TimerFilter,
    validate_filter,
    validate_limit,
)
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import validate_topic


class BulkCalls:
    def __init__(
        self, settings: Settings, store: TimerStore, lookups: TimerLookups, writer: Writer,
        backlog: Backlog,
    ) -> None:  # fmt: skip
        self._settings = settings
        self._store = store
        self._lookups = lookups
        self._writer = writer
        self._backlog = backlog

    def cancel(
        self, timer_filter: TimerFilter, limit: int = 0, page_token: str = "",
        purge: bool = False,
    ) -> BulkResult:  # fmt: skip
        """Cancel the SCHEDULED timers `timer_filter` selects, at most `limit` (0: the
        default), from `page_token` on; `purge`: the FIRED, un-acked ones too
        (timerwheel.wheels.bulk). One group commit; `next_token` empty when none remain."""
        validate_filter(timer_filter, self._settings, required=True)
        limit = validate_limit(limit)
        cursor = bulk_cf.decode_cursor(page_token)
        selection = bulk_cf.select(
            self._store, timer_filter, fired=purge, floors=self._lookups.wheel_floors(),
            cursor=cursor, limit=limit, budget=BULK_SCAN_BUDGET,
        )  # fmt: skip
        next_token = bulk_cf.encode_cursor(selection.next)
        if not selection.ids:
            return BulkResult(next_token=next_token)
        op = BulkCancelOp(filter=timer_filter, message_ids=selection.ids, purge=purge)
        cancelled, fired, cancelled_ids = self._writer.wait(self._writer.submit(op))
        for topic, ids in fired.items():  # out of the backlog, as an ack takes them
            self._backlog.taken(topic, len(ids))
        purged = sum(map(len, fired.values()))
        return BulkResult(cancelled, purged, next_token, fired, cancelled_ids)

    def redrive(
        self, dlq_topic: str, timer_filter: TimerFilter, limit: int = 0, page_token: str = ""
    ) -> RedriveResult:
        """Move the dead letters of `dlq_topic` that `timer_filter` selects (its topic: the
        one they came from; empty: all) back to their topics, at most `limit`, from
        `page_token` on (RedriveOp). One group commit."""
        validate_topic(dlq_topic, self._settings, "dead_letter_topic")
        validate_filter(timer_filter, self._settings, required=False)
        limit = validate_limit(limit)
        cursor = bulk_cf.decode_cursor(page_token)
        selection = bulk_cf.select_dead_letters(
            self._store, dlq_topic, timer_filter, cursor, limit, BULK_SCAN_BUDGET
        )
        next_token = bulk_cf.encode_cursor(selection.next)
        if not selection.ids:
            return RedriveResult([], next_token)
        op = RedriveOp(dlq_topic=dlq_topic, filter=timer_filter, message_ids=selection.ids)
        moved = self._writer.wait(self._writer.submit(op))
        # off the dead-letter topic (their new fires count as fires)
        self._backlog.taken(dlq_topic, len(moved))
        return RedriveResult(moved, next_token)
