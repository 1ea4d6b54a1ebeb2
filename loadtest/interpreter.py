"""Which Python interpreter a benchmark ran on: its build moves every figure.

The harness spawns the server with its own interpreter (timerwheel.loadtest.server_proc), so
one interpreter runs both. On one machine, alternating runs of the same code, Debian's
``/usr/bin/python3.11`` (3.11.2, libpython linked into the executable) took noticeably less
CPU for the engine alone than a pyenv build of 3.11.7 (libpython a shared library), and the
one process held a clearly higher send rate (docs/lab-log.md has the runs). So a run says
which interpreter it was, and whether that process reaches libpython through a shared
library (position-independent code, its calls through the PLT), which ``/proc/self/maps``
tells; whether a build was profile-guided or link-time optimised, nothing in the process
does.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

MAPS = Path("/proc/self/maps")


def interpreter(maps: Path = MAPS) -> dict:
    """{"version", "executable", "libpython"} of this process: the executable with
    symlinks resolved (a venv's python names the interpreter it was made from);
    libpython "shared" where the process maps a libpython library, "static" where it
    does not, None where `maps` cannot be read (no /proc)."""
    return {
        "version": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": os.path.realpath(sys.executable),
        "libpython": _libpython(maps),
    }


def _libpython(maps: Path) -> str | None:
    try:
        mapped = maps.read_text()
    except OSError:
        return None
    return "shared" if "/libpython" in mapped else "static"


def describe(python: dict) -> str:
    """One line for a report: ``CPython 3.11.7, /usr/bin/python3.11, libpython shared``."""
    libpython = python["libpython"]
    linked = "libpython unknown" if libpython is None else f"libpython {libpython}"
    return f"{python['version']}, {python['executable']}, {linked}"
