"""TimerService: proto <-> domain translation, nothing else.

Validation, idempotency and storage are the engine's; redelivery and backpressure are the
delivery hub's. Each method converts the request (a send's: timerwheel.server.send_requests),
calls them, converts the answer, and lets `timerwheel.server.errors.rpc_errors` turn
domain errors into status codes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from timerwheel.common import SendResult
from timerwheel.delivery.api import DeliveryApi
from timerwheel.delivery.subscriber import DeliveryRow
from timerwheel.engine.api import TimerApi
from timerwheel.security.limits import ByteBudget, caller_identity
from timerwheel.server.cluster_map import cluster_map_response
from timerwheel.server.errors import rpc_errors
from timerwheel.server.search import is_search, search_pending
from timerwheel.server.send_requests import spec_from_proto, specs_from_proto, when_from_proto
from timerwheel.store.records import delivery_parts
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from timerwheel.wheels.domain import Repeat, Timer
from timerwheel.wheels.trace import TraceEvent
from timerwheel.wheels.validation import validate_ack_count, validate_consumer_name

NO_UPPER_BOUND_MS = 2**63 - 1  # List with to_ms=0: every pending timer from from_ms on


def repeat_message(repeat: Repeat) -> pb.Repeat:
    return pb.Repeat(
        every_ms=repeat.every_ms, cron=repeat.cron, time_zone=repeat.time_zone,
        end_at_ms=repeat.end_at_ms, max_count=repeat.max_count,
        missed=int(repeat.missed),  # type: ignore[arg-type]  # an IntEnum's value is the proto enum's
        catch_up_window_ms=repeat.catch_up_window_ms, max_catch_up=repeat.max_catch_up,
    )  # fmt: skip


def send_response(result: SendResult) -> pb.SendResponse:
    return pb.SendResponse(
        message_id=result.message_id,
        deliver_at_ms=result.deliver_at_ms,
        existed=result.existed,
        existing_state=int(result.existing_state),  # type: ignore[arg-type]  # an IntEnum's value is the proto enum's
    )


def timer_message(timer: Timer, include_body: bool = True) -> pb.TimerMessage:
    return pb.TimerMessage(
        message_id=timer.message_id,
        topic=timer.topic,
        body=timer.body if include_body else b"",
        properties=timer.properties,
        deliver_at_ms=timer.deliver_at_ms,
        created_at_ms=timer.created_at_ms,
        state=int(timer.state),  # type: ignore[arg-type]  # an IntEnum's value is the proto enum's
        wheel=timer.wheel,
        fired_at_ms=timer.fired_at_ms,
        acked_at_ms=timer.acked_at_ms,
        cancelled_at_ms=timer.cancelled_at_ms,
        repeat=repeat_message(timer.repeat) if timer.repeat is not None else None,
        next_occurrence=timer.next_occurrence,
        paused=timer.paused,
        trace=[trace_event(event) for event in timer.trace],
        attempts=timer.attempts,
    )


def trace_event(event: TraceEvent) -> pb.TraceEvent:
    return pb.TraceEvent(
        kind=int(event.kind),  # type: ignore[arg-type]  # an IntEnum's value is the proto enum's
        at_ms=event.at_ms, wheel=event.wheel,
        from_wheel=event.from_wheel, attempt=event.attempt, subscriber=event.subscriber,
        detail=event.detail, deliver_at_ms=event.deliver_at_ms,
    )  # fmt: skip


def send_batch_response(results: list[SendResult]) -> pb.SendBatchResponse:
    """A SendBatch's answer, one result a message in the order sent."""
    response = pb.SendBatchResponse()
    add = response.results.add  # built in place: about half the cost of append()
    for result in results:
        if result.existed:  # rare: keep the common case at two fields
            add(
                message_id=result.message_id,
                deliver_at_ms=result.deliver_at_ms,
                existed=True,
                existing_state=int(result.existing_state),
            )
        else:
            add(message_id=result.message_id, deliver_at_ms=result.deliver_at_ms)
    return response


def delivery_batch(rows: list[DeliveryRow]) -> pb.DeliveryBatch:
    """The stream's next message, from the fired records as stored
    (`timerwheel.store.records.delivery_parts`): each distinct topic decoded once a batch."""
    out = pb.DeliveryBatch()
    add = out.deliveries.add  # built in place: append() would copy each message
    topics: dict[bytes, str] = {}
    for _, message_id, record, attempt in rows:
        stored_topic, body, properties, deliver_at_ms, fired_at_ms = delivery_parts(record)
        topic = topics.get(stored_topic)
        if topic is None:
            topic = topics[stored_topic] = stored_topic.decode()
        delivery = add(
            message_id=message_id,
            topic=topic,
            body=body,
            deliver_at_ms=deliver_at_ms,
            fired_at_ms=fired_at_ms,
            attempt=attempt,
        )
        if properties:  # properties={} in add() is costly even empty
            delivery.properties.update(properties)
    return out


class TimerService(pb_grpc.TimerServiceServicer):
    def __init__(
        self, engine: TimerApi, hub: DeliveryApi[Any], budget: ByteBudget | None = None,
        cluster_map: Callable[[], dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        """`budget`: the process's bytes of calls in progress, which the request guard
        charges each request to before decoding it (timerwheel.security.guard); responses
        being built (Get, List) are charged here. Without it, a budget of its own.
        `cluster_map`: a cluster node's map (ClusterMap); None on a single node."""
        self._engine = engine
        self._hub = hub
        self._cluster_map = cluster_map
        # Sends refused while fires run late, before validation (timerwheel.wheels.admission)
        self._admit_send: Callable[[], None] = getattr(engine, "admit_send", lambda: None)
        settings = engine.settings
        limit = settings.max_inflight_request_bytes
        self._budget = budget or ByteBudget(limit, "max_inflight_request_bytes")
        # What one List page with bodies may read (timerwheel.store.timer_reads: the page
        # ends at max_list_bytes, one record at least), charged before it is read.
        largest_record = settings.max_body_bytes + settings.max_properties_bytes
        self._list_bytes = max(settings.max_list_bytes, largest_record)
        # A Get reads its record before its size is known: Gets with bodies read a few at
        # a time (as many as the budget holds records of the largest size), so the
        # records read and not yet charged stay bounded whatever the number of calls.
        self._body_reads = threading.BoundedSemaphore(max(1, limit // largest_record))

    def Send(self, request: pb.SendRequest, context: grpc.ServicerContext) -> pb.SendResponse:
        with rpc_errors(context, "Send"):
            self._admit_send()
            spec = spec_from_proto(request)
            [result] = self._engine.send_batch_async([spec]).result()
            return send_response(result)

    def SendBatch(
        self, request: pb.SendBatchRequest, context: grpc.ServicerContext
    ) -> pb.SendBatchResponse:
        with rpc_errors(context, "SendBatch"):
            self._admit_send()
            specs = specs_from_proto(request.messages)
            if not specs:
                return pb.SendBatchResponse()
            # The whole batch in one engine call: one group commit, atomic together.
            return send_batch_response(self._engine.send_batch_async(specs).result())

    def Cancel(self, request: pb.CancelRequest, context: grpc.ServicerContext) -> pb.CancelResponse:
        with rpc_errors(context, "Cancel"):
            state = int(self._engine.cancel(request.message_id))
            return pb.CancelResponse(state=state)  # type: ignore[arg-type]  # as above

    def Get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> pb.TimerMessage:
        with rpc_errors(context, "Get"):
            if request.include_trace:  # deliveries the hub holds for their Ack, first
                self._hub.write_trace([request.message_id])
            # A place to read a body in (a RocksDB read: never a long wait), kept until
            # the record's bytes are charged to the budget or refused.
            reading = self._body_reads if request.include_body else contextlib.nullcontext()
            with reading:
                timer = self._engine.get(request.message_id, request.include_trace)
                size = len(timer.body) if request.include_body else 0
                self._budget.take(size, "Get response")
            try:
                return timer_message(timer, request.include_body)
            finally:
                self._budget.give_back(size)

    def List(self, request: pb.ListRequest, context: grpc.ServicerContext) -> pb.ListResponse:
        with rpc_errors(context, "List"):
            to_ms = request.to_ms or NO_UPPER_BOUND_MS
            # Bodies are charged before they are read: the most a page may hold of them.
            size = self._list_bytes if request.include_body else 0
            with self._budget.hold(size, "List response with bodies"):
                if is_search(request):
                    timers, token = search_pending(self._engine, request, to_ms)
                else:
                    timers, token = self._engine.list_pending(
                        request.topic, request.from_ms, to_ms, request.limit,
                        request.page_token, request.include_body,
                    )  # fmt: skip
                return pb.ListResponse(
                    messages=[timer_message(t, request.include_body) for t in timers],
                    next_page_token=token,
                )

    def Ack(self, request: pb.AckRequest, context: grpc.ServicerContext) -> pb.AckResponse:
        with rpc_errors(context, "Ack"):
            validate_ack_count(len(request.message_ids), self._engine.settings)
            return pb.AckResponse(acked=self._hub.ack(request.topic, list(request.message_ids)))

    def Reschedule(
        self, request: pb.RescheduleRequest, context: grpc.ServicerContext
    ) -> pb.RescheduleResponse:
        with rpc_errors(context, "Reschedule"):
            deliver_at_ms = self._engine.reschedule(request.message_id, when_from_proto(request))
            return pb.RescheduleResponse(deliver_at_ms=deliver_at_ms)

    def PauseSeries(
        self, request: pb.PauseSeriesRequest, context: grpc.ServicerContext
    ) -> pb.PauseSeriesResponse:
        with rpc_errors(context, "PauseSeries"):
            changed, deliver_at_ms = self._engine.pause_series(request.series_id, True)
            return pb.PauseSeriesResponse(changed=changed, deliver_at_ms=deliver_at_ms)

    def ResumeSeries(
        self, request: pb.ResumeSeriesRequest, context: grpc.ServicerContext
    ) -> pb.ResumeSeriesResponse:
        with rpc_errors(context, "ResumeSeries"):
            changed, deliver_at_ms = self._engine.pause_series(request.series_id, False)
            return pb.ResumeSeriesResponse(changed=changed, deliver_at_ms=deliver_at_ms)

    def Count(self, request: pb.CountRequest, context: grpc.ServicerContext) -> pb.CountResponse:
        with rpc_errors(context, "Count"):
            pending, from_ms, to_ms = self._engine.count(
                request.topic, request.from_ms, request.to_ms
            )
            return pb.CountResponse(pending=pending, from_ms=from_ms, to_ms=to_ms)

    def Nack(self, request: pb.NackRequest, context: grpc.ServicerContext) -> pb.NackResponse:
        with rpc_errors(context, "Nack"):
            # Before the ids are copied into a list: a huge refused Nack costs no memory.
            validate_ack_count(len(request.message_ids), self._engine.settings, "Nack")
            nacked, dead = self._hub.nack(
                request.topic, list(request.message_ids), request.reason,
                request.redeliver_after_ms, request.release,
            )  # fmt: skip
            return pb.NackResponse(nacked=nacked, dead_lettered=dead)

    def ClusterMap(
        self, request: pb.ClusterMapRequest, context: grpc.ServicerContext
    ) -> pb.ClusterMapResponse:
        with rpc_errors(context, "ClusterMap"):
            return cluster_map_response(self._cluster_map() if self._cluster_map else None)

    def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.DeliveryBatch]:
        with rpc_errors(context, "Subscribe"):
            name = validate_consumer_name(request.consumer) or context.peer()
            subscriber = self._hub.subscribe(
                request.topic, request.max_in_flight, caller_identity(context), name
            )
            # Runs when the stream ends in any way (client gone, cancelled, deadline).
            context.add_callback(subscriber.close)
            batches = self._hub.batches(subscriber)  # a generator: closed below
            try:
                for batch in batches:
                    if not context.is_active():
                        return
                    if batch:
                        yield delivery_batch(batch)
            finally:
                batches.close()  # first: a batch read ahead comes back before the release
                self._hub.release(subscriber)
