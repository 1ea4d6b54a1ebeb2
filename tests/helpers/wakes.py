"""A condition that counts its notifications: the tests of who wakes whom (a wake that
finds nothing to do costs two thread switches and a turn of the GIL)."""

from __future__ import annotations

import threading


class CountingCondition(threading.Condition):
    """`threading.Condition`, counting the calls that wake waiters (`notify_all` too)."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)
