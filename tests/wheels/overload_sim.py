"""A one-process server under offered overload, in virtual time, for the admission rules
(timerwheel.wheels.admission): what each rule does to fire lateness.

The model, one millisecond a step:
- the process has one core (1,000 µs a step), and three kinds of work: refusing a send
  (`refuse_us`, at the door, before validation), storing an admitted send (`send_us`:
  validation, encoding, its share of a commit), and firing a due timer (`fire_us`: the
  fire, its delivery and ack). Fires and sends share the core as threads share the GIL:
  while both have work, the fires get `fire_share` of it, and either takes what the
  other leaves;
- one producer offers `offered_per_s` sends, keeps at most `window` of them in the
  server, and after a refusal waits the refusal's retry-after before it offers again
  (nothing is dropped: the refused wait at the producer);
- each stored send is due `delay` later, 3..60 s, from a seeded generator (as the
  `overload` scenario's delays);
- the writer observes each step's fire lag (now minus the earliest due time fired this
  step, 0 when none) and, each SAMPLE_MS, samples its CPU clock (the µs it used), the
  sends stored and timers fired, and the due load ahead (DueHorizon).
Fire lateness is now minus the due time when a timer is fired, counted per timer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from timerwheel.wheels.admission import SAMPLE_MS, Admission, DueHorizon

STEP_US = 1_000
MAX_WAIT_MS = 1_000  # a producer's longest wait after refusals in a row


@dataclass
class Outcome:
    stored: int
    fired: int
    lateness_ms: list[int]  # count of fires by lateness (index: ms late)
    refused: int
    max_load_pct: int

    def quantile_ms(self, q: float) -> int:
        """The lateness at or below which `q` of the fires ran."""
        need = q * self.fired
        seen = 0
        for late_ms, count in enumerate(self.lateness_ms):
            seen += count
            if seen >= need:
                return late_ms
        return len(self.lateness_ms)


def simulate(
    gate: Admission,
    *,
    send_us: int,
    fire_us: int,
    offered_per_s: int,
    seconds: int = 60,
    refuse_us: int = 10,
    fire_share: float = 0.5,
    producers: int = 8,
    window: int = 250,
    stolen_pct: int = 0,
    stolen_ms: int = 2_000,
    stolen_every_ms: int = 10_000,
    seed: int = 7,
    timeline: list | None = None,
) -> Outcome:
    rng = random.Random(seed)
    end_ms = 3_600_000  # a bound only: the run ends once every timer fired
    due = [0] * (end_ms + 61_000)  # timers due at each ms, not fired yet
    fire_from = 0  # earliest ms that may still hold an unfired timer
    waiting = 0  # timers due by now, not fired
    horizon = DueHorizon()
    lateness = [0]
    in_server = [0] * producers  # each producer's sends admitted, not stored yet
    offered_left = 0.0
    paused_until = [0] * producers
    streak = [0] * producers  # refusals in a row: the wait doubles (timerwheel/retries.py)
    fire_credit = send_credit = 0.0
    cpu_us = stored = fired = refused = max_load = 0
    sample_sends = sample_fires = 0
    per_ms = offered_per_s / 1000
    for now in range(end_ms):
        # a neighbour (another process, a compaction) takes part of the core at times
        budget = STEP_US - (STEP_US * stolen_pct // 100 if now % stolen_every_ms < stolen_ms else 0)
        cpu_us -= STEP_US - budget  # not the process's CPU time
        waiting += due[now]
        # the producers offer what the schedule and their windows allow, the gate first
        if now < seconds * 1000:  # then the producers stop, as the loadtest's do
            offered_left += per_ms
        for p in range(producers if offered_left >= 1 and now < seconds * 1000 else 0):
            while offered_left >= 1 and in_server[p] < window and now >= paused_until[p]:
                budget -= refuse_us  # asking the gate costs about what a refusal does
                refusal = gate.refused()
                if refusal is not None:
                    refused += 1
                    wait_ms = refusal.retry_after_ms << min(streak[p], 6)
                    paused_until[p] = now + min(wait_ms, MAX_WAIT_MS)
                    streak[p] += 1
                    break
                streak[p] = 0
                offered_left -= 1
                in_server[p] += 1
        queued = sum(in_server)
        # fires and sends share the core; either takes what the other leaves
        fire_need, send_need = waiting * fire_us - fire_credit, queued * send_us - send_credit
        fire_cpu = min(fire_need, budget * fire_share if send_need > 0 else budget)
        send_cpu = min(send_need, budget - fire_cpu)
        fire_cpu = min(fire_need, budget - send_cpu)
        cpu_us += STEP_US - budget + max(fire_cpu, 0) + max(send_cpu, 0)
        fire_credit += max(fire_cpu, 0)
        send_credit += max(send_cpu, 0)
        earliest = None
        while fire_credit >= fire_us and waiting:
            if not due[fire_from]:
                fire_from += 1
                continue
            earliest = fire_from if earliest is None else earliest
            n = min(due[fire_from], int(fire_credit // fire_us))
            due[fire_from] -= n
            waiting -= n
            fire_credit -= n * fire_us
            late = now - fire_from
            if late >= len(lateness):
                lateness.extend([0] * (late + 1 - len(lateness)))
            lateness[late] += n
            fired += n
            sample_fires += n
        times = []
        p = now % producers  # the producers' sends are served in turn
        while send_credit >= send_us and queued:
            while not in_server[p]:
                p = (p + 1) % producers
            send_credit -= send_us
            in_server[p] -= 1
            queued -= 1
            deliver_ms = now + rng.randint(3_000, 60_000)
            due[deliver_ms] += 1
            times.append(deliver_ms)
        stored += len(times)
        sample_sends += len(times)
        horizon.add(times, now)
        gate.observe(now, now - earliest if earliest is not None else 0)
        if now % SAMPLE_MS == 0:
            gate.due.sample(now, cpu_us / 1e6, sample_sends, sample_fires,
                            horizon.due_per_s(now), gate.lag.refusing)  # fmt: skip
            max_load = max(max_load, gate.due.load_pct)
            sample_sends = sample_fires = 0
        if timeline is not None and now % 1000 == 999:
            timeline.append((now // 1000, stored, fired, waiting, gate.refusing))
        if now >= seconds * 1000 and not queued and fired == stored:
            break
    return Outcome(stored, fired, lateness, refused, max_load)
