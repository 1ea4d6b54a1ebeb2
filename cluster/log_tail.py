"""A partition's log read from one sequence on through one JetStream pull consumer kept
open from read to read: what a warm standby tails (`timerwheel.cluster.standby`;
docs/cluster.md, "Warm standby").

Making a consumer is a request to the JetStream meta leader (a Raft proposal across the
servers) and deleting it another; a standby that made one for every read made four a
second a partition. Here the consumer is made once, with its state in memory and one
replica (losing it only makes the standby make another), and each `read` is one pull
request that answers at once: every message the stream has past the last one read (up
to `BATCH` a request, asked again while batches come back full), then `404 No Messages`.

The consumer's filter is the whole stream (`tw.p<N>.>`), so the messages it delivers
carry consecutive stream sequences unless some were removed. A message is removed only
by the purge below a published snapshot pointer (`PartitionSnapshots.purge_below`), and
nothing is resent to a consumer that acks nothing: so a `read` stops at the first gap
(`Read.gap`), returns what it read before it, and the tail is not read again. Its caller
decides from the latest pointer whether the gap is covered by a snapshot (load it) or
was a delivery lost on the way (read again from the same sequence through a new tail).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import errors as js_errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

if TYPE_CHECKING:  # nats_io opens tails (PartitionLog.tail)
    from timerwheel.cluster.nats_io import PartitionLog

BATCH = 512  # messages a pull request asks for
ANSWER_S = 5.0  # a pull request's first message or status at most (else TimeoutError)
INACTIVE_S = 30.0  # the server drops a consumer not pulled from this long (its reader died)
API_PREFIX = "$JS.API"  # nats-py's default JetStream API prefix (nats.js.api.DEFAULT_PREFIX)


class TailGone(Exception):
    """The consumer is not there any more (a NATS restart, its inactive threshold) or the
    server refused a pull request: the caller reads on through a new tail."""


class _NoResponders(Exception):
    """No server answered the pull request: the consumer is gone, or not known yet."""


@dataclass
class Read:
    records: list[tuple[int, bytes]] = field(default_factory=list)  # log records, in order
    through: int = 0  # the last stream sequence read without a gap before it
    stream_last: int = 0  # the stream's last sequence as the last message read saw it
    gap: bool = False  # the stream skipped sequences after `through`: this tail is done


class LogTail:
    """The log of `log`'s partition above stream sequence `after`, read in order."""

    def __init__(self, log: PartitionLog, after: int) -> None:
        self.log = log
        self.through = after
        self.name = ""
        self._inbox = ""
        self._sub: Subscription | None = None

    async def open(self) -> LogTail:
        js = self.log.js
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.through + 1,
            ack_policy=AckPolicy.NONE, filter_subject=f"tw.p{self.log.partition}.>",
            inactive_threshold=INACTIVE_S, mem_storage=True, num_replicas=1,
        )  # fmt: skip
        info = await js.add_consumer(self.log.stream, config=config)
        self.name = str(info.name)
        connection = js._nc
        self._inbox = connection.new_inbox()
        self._sub = await connection.subscribe(self._inbox)
        return self

    async def read(self) -> Read:
        """Every message past `through` the stream has now (the log subject's records
        returned), up to the first gap."""
        assert self._sub is not None, "read after close"
        found = Read(through=self.through, stream_last=self.through)
        while True:
            try:
                delivered = await self._pull(found)
            except _NoResponders as error:
                await self._still_there(error)
                delivered = 0  # a consumer just made: the servers learn of it a moment later
            if found.gap or delivered < BATCH:
                self.through = found.through
                return found

    async def _still_there(self, error: _NoResponders) -> None:
        """Raises TailGone unless the consumer is there (it answers no pull for a moment
        after it is made, while its subscription reaches every server)."""
        try:
            await self.log.js.consumer_info(self.log.stream, self.name)
        except js_errors.NotFoundError as gone:
            raise TailGone(f"consumer {self.name}: {error}") from gone

    async def _pull(self, found: Read) -> int:
        """One pull request's messages folded into `found`; how many it delivered."""
        assert self._sub is not None
        subject = f"{API_PREFIX}.CONSUMER.MSG.NEXT.{self.log.stream}.{self.name}"
        payload = b'{"batch":%d,"no_wait":true}' % BATCH
        await self.log.js._nc.publish(subject, payload, reply=self._inbox)
        delivered = 0
        while delivered < BATCH:
            message: Msg = await self._sub.next_msg(timeout=ANSWER_S)
            status = (message.headers or {}).get("Status")
            if status in ("404", "408"):  # nothing more now; the request expired
                return delivered
            if status == "503":
                raise _NoResponders("503 no responders")
            if status is not None:  # 409: the consumer deleted, the request refused, ...
                description = (message.headers or {}).get("Description", "")
                raise TailGone(f"consumer {self.name}: {status} {description}".rstrip())
            delivered += 1
            metadata = message.metadata
            sequence = int(metadata.sequence.stream)
            if found.gap or sequence != found.through + 1:
                found.gap = True  # the rest of this request's answer is drained, not used
                continue
            found.through = sequence
            found.stream_last = max(found.stream_last, sequence + int(metadata.num_pending or 0))
            if message.subject == self.log.log_subject:
                found.records.append((sequence, message.data))
        return delivered

    async def close(self) -> None:
        """Drop the subscription and the consumer (the server would drop it after
        INACTIVE_S in any case)."""
        sub, self._sub = self._sub, None
        try:
            if sub is not None:
                await sub.unsubscribe()
        finally:
            if self.name:
                await asyncio.wait_for(
                    self.log.js.delete_consumer(self.log.stream, self.name), ANSWER_S
                )
