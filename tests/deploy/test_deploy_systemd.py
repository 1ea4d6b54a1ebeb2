"""deploy/timerwheel.service cannot rot: systemd's own `systemd-analyze verify` accepts it
(its ExecStart pointed at this checkout's `timerwheel`), its flags are ones `serve` takes,
and it gives the supervisor's ordered stop the time that stop may take. What the stop
itself does (SIGTERM to `serve` alone, KillMode=mixed) is tests/procs/test_supervisor.py's."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.waits import WAIT_S

from timerwheel.cli.commands import serve
from timerwheel.cli.main import build_parser
from timerwheel.procs.supervisor import CHILD_STOP_S, ENGINE_STOP_S
from timerwheel.wheels.settings import Settings

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "timerwheel.service"
INSTALLED = "/opt/timerwheel/bin/timerwheel"


def directives() -> dict[str, str]:
    """`Key=value` lines of the unit (each key appears once in it)."""
    lines = [line for line in UNIT.read_text().splitlines() if line and line[0] not in "#["]
    return dict(line.split("=", 1) for line in lines)


def verify(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: apt-get install systemd (see .ci/run)"
    unit = tmp_path / "timerwheel.service"
    unit.write_text(text)
    return subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=WAIT_S
    )


def this_checkouts_unit() -> str:
    here = Path(sys.executable).with_name("timerwheel")
    assert here.exists(), f"{here}: the package's console script (pip install -e .)"
    assert INSTALLED in UNIT.read_text()
    return UNIT.read_text().replace(INSTALLED, str(here))


@pytest.mark.system  # systemd-analyze
def test_systemd_accepts_the_unit(tmp_path):
    result = verify(this_checkouts_unit(), tmp_path)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.system  # systemd-analyze
def test_systemd_would_say_so_of_a_misspelt_directive(tmp_path):
    """The check above is live: a typo is a warning on stderr (verify still exits 0)."""
    result = verify(this_checkouts_unit().replace("KillMode=mixed", "KillMode=mixd"), tmp_path)
    assert "mixd" in result.stderr


def test_exec_start_is_a_serve_command_line_whose_data_is_in_the_state_directory():
    unit = directives()
    command, *argv = shlex.split(unit["ExecStart"])
    assert command == INSTALLED
    args = build_parser().parse_args(argv)
    settings = serve.settings_from_args(args)
    assert settings.data_dir.startswith(f"/var/lib/{unit['StateDirectory']}/")
    assert settings.host == "127.0.0.1"  # anything else needs TLS and tokens
    assert serve.security_from_args(args).insecure is False


def test_the_stop_is_the_supervisors_and_has_the_time_it_may_take():
    unit = directives()
    assert unit["KillMode"] == "mixed"  # SIGTERM to `serve` alone; it stops the rest in order
    grace_s = Settings().shutdown_grace_ms / 1000
    ordered_stop_s = (grace_s + CHILD_STOP_S) + CHILD_STOP_S + ENGINE_STOP_S
    assert int(unit["TimeoutStopSec"]) > ordered_stop_s
