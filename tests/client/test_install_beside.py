"""`pip install` of the built wheel into a fresh venv, beside packages named `server`,
`store` and `console`: both sets import, neither shadows the other.

The wheel installs one top-level package, `timerwheel` (the rooms are
`timerwheel.server`, `timerwheel.store`, ...: tests/client/test_packaging.py), so a
user's own `server` or `store` is theirs. Offline: the wheel is built with this venv's
setuptools (no build isolation) and installed with --no-deps; the fresh venv reaches the
dependencies through a path file naming this venv's site-packages, as a plain directory
(its own path files, among them the editable install of the repo, are not read), so the
timerwheel it imports is the installed wheel's.
"""

from __future__ import annotations

import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.system  # builds a wheel and a venv: tens of seconds

CHECK = """
import importlib.metadata, pathlib, sys
import timerwheel, timerwheel.server.app, timerwheel.store.keys, timerwheel.console.app
import server, store, console
assert (server.MARKER, store.MARKER, console.MARKER) == ("server", "store", "console")
assert not hasattr(timerwheel.server, "MARKER")
assert pathlib.Path(timerwheel.__file__).is_relative_to(sys.prefix), timerwheel.__file__
print("ok", importlib.metadata.version("timerwheel"))
"""


def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_wheel_installs_beside_packages_named_like_its_rooms(tmp_path):
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("timerwheel-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = str(env_dir / "bin" / "python")
    # pip of this venv, installing into the fresh one (no pip is downloaded there)
    run(
        sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q",
        str(wheel), cwd=tmp_path,
    )  # fmt: skip
    target_site = run(
        python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp_path
    ).stdout.strip()
    (Path(target_site) / "dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    user_code = tmp_path / "user"
    for name in ("server", "store", "console"):
        (user_code / name).mkdir(parents=True)
        (user_code / name / "__init__.py").write_text(f"MARKER = {name!r}\n")
    # The user's packages in the current directory, first on sys.path as `python -c` has it.
    checked = run(python, "-c", CHECK, cwd=user_code)
    assert checked.stdout.startswith("ok ")
    # The command the wheel installs runs there too, among the user's packages.
    shown = run(str(env_dir / "bin" / "timerwheel"), "--version", cwd=user_code)
    assert checked.stdout.split()[1] in shown.stdout + shown.stderr
