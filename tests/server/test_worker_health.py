"""timerwheel.server.worker_health: every health Check answer names the worker that sent it in its
trailing metadata ("0/1" for the one-process server), for any caller (health is not
guarded), and the health statuses are grpc_health's as before."""

from __future__ import annotations

from grpc_health.v1 import health_pb2, health_pb2_grpc

from timerwheel.connections import WORKER_METADATA_KEY
from timerwheel.server.worker_health import WorkerHealth


def test_a_health_answer_names_the_worker_and_keeps_its_status(client):
    stub = health_pb2_grpc.HealthStub(client.channel)
    response, call = stub.Check.with_call(health_pb2.HealthCheckRequest(), timeout=10)
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    assert (WORKER_METADATA_KEY, "0/1") in tuple(call.trailing_metadata())


def test_a_worker_says_its_index_and_how_many_workers_there_are():
    class Context:
        trailing = None

        def set_trailing_metadata(self, metadata):
            self.trailing = metadata

    servicer, context = WorkerHealth(1, 3), Context()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    answer = servicer.Check(health_pb2.HealthCheckRequest(), context)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert context.trailing == ((WORKER_METADATA_KEY, "1/3"),)
