"""Child process for the crash test: an engine under load, printing what was acknowledged.

Runs on a clock that goes `speed` times faster than real time, so minute cascades (and an
hour cascade) happen within the seconds before the parent kills it. It also keeps a
recurring series (`SERIES_ID`) firing every 100 ms of real time. Each printed line is
a batch of message ids whose send_batch call returned, i.e. that the producer was told
are stored; the parent checks every one of them after SIGKILL.
"""

from __future__ import annotations

import random
import sys
import time

from timerwheel.engine.engine import Engine
from timerwheel.wheels.domain import MissedPolicy, Repeat, SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import MINUTE_MS, Settings

SERIES_ID = "series-crash"
SERIES_EVERY_MS = MINUTE_MS  # at the parent's speed of 600: every 100 ms of real time
SERIES_COUNT = 400


def series_spec(base_ms: int) -> SendSpec:
    """The same send at every start: the restarted child's resend is idempotent."""
    repeat = Repeat(every_ms=SERIES_EVERY_MS, max_count=SERIES_COUNT, missed=MissedPolicy.FIRE_EACH)
    return SendSpec(
        "crash", b"tick", When(WhenKind.DELIVER_AT, base_ms + SERIES_EVERY_MS), {}, SERIES_ID,
        options=SendOptions(repeat=repeat),
    )  # fmt: skip


class ScaledClock:
    """Virtual time that runs `speed` times faster than the wall clock from `anchor_s`."""

    def __init__(self, base_ms: int, anchor_s: float, speed: int) -> None:
        self._base_ms, self._anchor_s, self._speed = base_ms, anchor_s, speed

    def now_ms(self) -> int:
        return self._base_ms + int((time.time() - self._anchor_s) * 1000 * self._speed)

    def monotonic_ms(self) -> int:  # runs as fast as the wall: no clock steps
        return self.now_ms()


def main() -> None:
    data_dir, base_ms, anchor_s, speed = (
        sys.argv[1],
        int(sys.argv[2]),
        float(sys.argv[3]),
        int(sys.argv[4]),
    )
    settings = Settings(data_dir=data_dir, sync_writes=True, cascade_chunk=500, fire_chunk=500)
    engine = Engine(settings, ScaledClock(base_ms, anchor_s, speed))
    rng = random.Random()
    engine.send(series_spec(base_ms))
    print(f"series {SERIES_ID}", flush=True)
    print("ready", flush=True)
    while True:
        specs = [
            SendSpec("crash", b"x" * 64, When(WhenKind.DELAY, rng.randrange(0, 40 * MINUTE_MS)))
            for _ in range(200)
        ]
        results = engine.send_batch(specs)
        sys.stdout.write("acked " + " ".join(r.message_id for r in results) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
