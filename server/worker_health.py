"""gRPC health that also says which worker answered, so a client can spread its connections.

With `timerwheel serve --workers N` the kernel gives each TCP connection to one worker
process (SO_REUSEPORT, by a hash of the connection's addresses and ports), so a client's
few connections can all land on one worker while another idles: a harness run's
connections often split unevenly over two workers. The server cannot choose (grpcio
binds and accepts in its C core), but it can tell: every health `Check` answer carries
`timerwheel-worker: INDEX/COUNT` in its trailing metadata ("0/1" for the one-process
server), and `timerwheel.Client.wait_ready` dials a connection again while it shares a
worker that another worker has fewer of (timerwheel/connections.py). Health is not
guarded (timerwheel.security.guard), so any client can ask; what it learns is the number
of worker processes and which one it reached.
"""

from __future__ import annotations

from grpc_health.v1 import health

from timerwheel.connections import WORKER_METADATA_KEY, worker_place


class WorkerHealth(health.HealthServicer):
    """`grpc_health`'s servicer, whose `Check` answers say which worker they came from."""

    def __init__(self, index: int = 0, count: int = 1) -> None:
        super().__init__()
        self._place = ((WORKER_METADATA_KEY, worker_place(index, count)),)

    def Check(self, request, context):
        context.set_trailing_metadata(self._place)
        return super().Check(request, context)
