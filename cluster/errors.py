"""What a node answers when a call is not its to answer (mapped to gRPC codes by
server/errors.py through their bases)."""

from __future__ import annotations

from timerwheel.wheels.domain import FailedPrecondition, ShuttingDown


class NotOwner(FailedPrecondition):
    """The call names an id of a partition another node owns: the message names it, so a
    client can go there (`timerwheel.Client` does)."""

    def __init__(self, partition: int, holder: str, address: str, epoch: int) -> None:
        name = holder.split("/", 1)[0]  # the holder is name/incarnation
        super().__init__(
            f"not owner of partition {partition}: owner is {name} at {address}, epoch {epoch}"
        )
        self.partition = partition
        self.owner = name
        self.address = address
        self.epoch = epoch


class NoOwner(ShuttingDown):
    """The partition has no owner at this moment (a takeover is under way): UNAVAILABLE,
    so the caller retries."""
