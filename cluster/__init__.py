"""Cluster mode's decisions, as pure code (docs/cluster.md).

Like `wheels/`, nothing here does I/O or reads a clock: callers pass the time and what the
store answered, and get back states and verdicts.

- `partitions`: which partition a message id belongs to; ids the cluster makes.
- `lease`: a node's view of one partition's lease, what to ask the lease store next, and
  the verdict (OWN, STOP, STANDBY) at a given monotonic time; `LeaseStore` and an
  in-memory twin.
- `fencing`: epoch markers and the append check JetStream applies
  (`Nats-Expected-Last-Subject-Sequence` on the epoch subject).
"""
