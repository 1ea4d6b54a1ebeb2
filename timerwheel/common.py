"""The vocabulary the client and the server share: a timer's states, a send's answer, the
base error, and what counts as loopback.

It imports nothing but the standard library, so `timerwheel.Client` (and a client-only
install) needs nothing of the server; the domain core (`timerwheel.wheels.domain`) and the
security settings build on these definitions instead of repeating them.
"""

from __future__ import annotations

import ipaddress
from enum import IntEnum
from typing import NamedTuple


class State(IntEnum):
    """Lifecycle of a timer; values equal the proto enum `timerwheel.v1.State`."""

    UNSPECIFIED = 0
    SCHEDULED = 1
    FIRED = 2
    ACKED = 3
    CANCELLED = 4


class SendResult(NamedTuple):
    """The answer to a send. A NamedTuple: one is made per message on the hot path.

    `existed` is True when the send named a client-chosen id that was already stored (an
    idempotent retry): nothing new was stored, and `existing_state` is that timer's state
    now (it may be FIRED, ACKED or CANCELLED, so the retry will not be delivered again).
    """

    message_id: str
    deliver_at_ms: int
    existed: bool = False
    existing_state: State = State.UNSPECIFIED


class TimerwheelError(Exception):
    """Base of every error the service reports to a client."""


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP (127.0.0.0/8, ::1). Any other name counts as exposed:
    what it resolves to is not known here, and guessing wrong would expose the server."""
    cleaned = host.strip().strip("[]")
    if cleaned.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(cleaned).is_loopback
    except ValueError:
        return False
