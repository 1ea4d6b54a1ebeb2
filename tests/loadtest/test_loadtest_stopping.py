"""SIGTERM during a load run unwinds it (timerwheel.loadtest.stopping); the end-to-end stops of
the harness and the Redis peer are in tests/loadtest/test_loadtest.py and
tests/bench/test_peer_redis.py."""

import os
import signal

import pytest

from timerwheel.loadtest.stopping import unwind_on_sigterm


def test_sigterm_in_the_block_unwinds_it_and_says_so(capsys):
    cleaned_up = []
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped, unwind_on_sigterm("probe"):
        try:
            # CPython runs the handler as soon as the kill returns, in this (main) thread.
            os.kill(os.getpid(), signal.SIGTERM)
            pytest.fail("SIGTERM did not interrupt the block")
        finally:
            cleaned_up.append(True)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert cleaned_up == [True]
    assert "probe: stopped by SIGTERM" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is previous


def test_the_previous_handler_is_back_after_a_normal_exit():
    previous = signal.getsignal(signal.SIGTERM)
    with unwind_on_sigterm("probe"):
        assert signal.getsignal(signal.SIGTERM) is not previous
    assert signal.getsignal(signal.SIGTERM) is previous
