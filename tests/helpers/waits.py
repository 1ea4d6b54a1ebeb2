"""How long a test waits for anything that should happen soon, and a poll bounded by it."""

import time

WAIT_S = 10.0  # generous: the suite runs beside other work on 2 cores


def until(condition, what: str, timeout_s: float = WAIT_S):
    """Poll `condition` until it gives a true value, and return that value; fail naming
    `what` if it has not by `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return value
