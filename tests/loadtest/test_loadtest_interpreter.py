"""timerwheel.loadtest.interpreter: which interpreter a run's figures came from."""

from __future__ import annotations

import os
import platform
import sys

from timerwheel.loadtest.interpreter import describe, interpreter


def test_this_process_names_its_version_and_real_executable():
    found = interpreter()
    assert found["version"] == f"CPython {platform.python_version()}"
    # a venv's python is a symlink: the figures name the interpreter it points at
    assert found["executable"] == os.path.realpath(sys.executable)
    assert not os.path.islink(found["executable"])
    assert found["libpython"] in ("shared", "static")


def test_libpython_is_shared_where_the_process_maps_the_library(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
        "7f20-7f30 r-xp 00000000 08:01 13 /opt/py/lib/libpython3.11.so.1.0\n"
    )
    assert interpreter(maps)["libpython"] == "shared"
    maps.write_text("5600-5610 r-xp 00000000 08:01 11 /usr/bin/python3.11\n")
    assert interpreter(maps)["libpython"] == "static"
    assert interpreter(tmp_path / "absent")["libpython"] is None  # no /proc: unknown


def test_describe_is_one_line_saying_what_is_unknown():
    python = {"version": "CPython 3.11.7", "executable": "/opt/py/bin/python3.11"}
    assert describe({**python, "libpython": "shared"}) == (
        "CPython 3.11.7, /opt/py/bin/python3.11, libpython shared"
    )
    assert describe({**python, "libpython": None}).endswith(", libpython unknown")
