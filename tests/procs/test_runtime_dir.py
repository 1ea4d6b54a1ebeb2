"""The supervisor's runtime dir (timerwheel.procs.runtime_dir): private, locked for the life of its
supervisor, and removed by the next start once that supervisor is dead, SIGKILLed ones
included; nothing that is alive, not ours, or not a runtime dir is touched."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from helpers.waits import WAIT_S

from timerwheel.procs.runtime_dir import LOCK_NAME, RuntimeDir, sweep_dead

HOLD_A_DIR = """
import sys
from timerwheel.procs.runtime_dir import RuntimeDir
runtime, _ = RuntimeDir.create(sys.argv[1])
print(runtime.path, flush=True)
sys.stdin.read()  # alive until killed
"""


def _killed_holder(parent) -> str:
    """The runtime dir of a process that made it and was then SIGKILLed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_DIR, str(parent)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        path = proc.stdout.readline().strip()
        assert os.path.isdir(path)
    finally:
        proc.kill()
        proc.wait(timeout=WAIT_S)
        proc.stdout.close()
        proc.stdin.close()
    return path


def test_a_new_dir_is_private_and_locked_and_remove_deletes_it(tmp_path):
    runtime, swept = RuntimeDir.create(str(tmp_path))
    assert swept == []
    assert stat.S_IMODE(os.stat(runtime.path).st_mode) == 0o700
    assert os.listdir(runtime.path) == [LOCK_NAME]
    assert sweep_dead(str(tmp_path)) == []  # alive: its lock is held
    assert os.path.isdir(runtime.path)
    runtime.remove()
    assert os.listdir(tmp_path) == []


def test_the_dir_of_a_sigkilled_holder_is_removed_by_the_next_create(tmp_path):
    live, _ = RuntimeDir.create(str(tmp_path))
    try:
        dead = _killed_holder(tmp_path)
        os.mkdir(os.path.join(dead, "metrics"))  # what children leave: files of dead pids
        fresh, swept = RuntimeDir.create(str(tmp_path))
        assert swept == [dead]
        assert not os.path.exists(dead)
        assert os.path.isdir(live.path)  # its holder (this process) is alive
        fresh.remove()
    finally:
        live.remove()


def test_what_is_not_a_dead_runtime_dir_is_left_alone(tmp_path):
    dead = _killed_holder(tmp_path)
    unlocked = tmp_path / "timerwheel-nolock"  # an older version's, or one being made
    unlocked.mkdir()
    (tmp_path / "timerwheel-file").write_text("x")
    other = tmp_path / "other-dir"
    other.mkdir()
    (other / LOCK_NAME).write_text("")
    link = tmp_path / "timerwheel-link"
    link.symlink_to(dead)  # a symlink is not followed, even to a dead dir
    assert sweep_dead(str(tmp_path)) == [dead]
    assert sorted(os.listdir(tmp_path)) == [
        "other-dir", "timerwheel-file", "timerwheel-link", "timerwheel-nolock",
    ]  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a dir to another user")
def test_a_dead_dir_of_another_user_is_left_alone(tmp_path):
    dead = _killed_holder(tmp_path)
    os.chown(dead, 65534, 65534)
    assert sweep_dead(str(tmp_path)) == []
    assert os.path.isdir(dead)


def test_a_create_that_fails_after_making_its_dir_leaves_nothing(tmp_path, monkeypatch):
    def refuse_rename(source, target):
        raise PermissionError(13, "refused for the test", source)

    # Failing at the last step: the dir and its staged lock file exist but are unlocked
    # under the final name, so no later sweep would ever remove them.
    monkeypatch.setattr(os, "rename", refuse_rename)
    with pytest.raises(PermissionError, match="refused for the test"):
        RuntimeDir.create(str(tmp_path))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []
