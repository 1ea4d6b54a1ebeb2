"""How many examples a hypothesis search tries: the full budget under plain `pytest` (and
CI), a quarter of it in the inner loop `pytest -m "not system"`.

tests/conftest.py decides which at start-up (`pytest_configure`: the inner loop is a run
whose `-m` deselects `system`; `TIMERWHEEL_EXAMPLES=full` or `=inner` overrides) and
loads the hypothesis profile of the same name, which sets the budget of every search
without its own `max_examples`. A search that gives its own wraps it: `examples(150)`.
"""

from __future__ import annotations

INNER_SHARE = 4  # the inner loop tries a quarter of the examples
INNER_DEFAULT = 100 // INNER_SHARE  # hypothesis' default budget is 100
PROFILE_ENV = "TIMERWHEEL_EXAMPLES"

profile = "full"  # set by tests/conftest.py before any test module is imported


def examples(full: int) -> int:
    """`full` under plain `pytest`; a quarter of it (at least 10) in the inner loop."""
    return full if profile == "full" else max(10, full // INNER_SHARE)
