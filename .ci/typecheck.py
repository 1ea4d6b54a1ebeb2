"""Type-check the process seam and the domain core with mypy.

The rooms are installed as `timerwheel.<room>` from top-level folders (setuptools
package-dir), which mypy cannot follow from the repo (it never runs an editable install's
import hook). So this builds the installed shape from symlinks in a temporary directory
and checks the modules there, by their installed names.

    python .ci/typecheck.py          # what CI runs; exit 1 on any error
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Checked strictly enough to hold the seam: every protocol and both sides of it, and the
# pure core. Modules they import are read for their types but not reported on.
CHECKED = [
    "timerwheel.common",
    "timerwheel.durations",
    "timerwheel.wheels",
    "timerwheel.cluster",
    "timerwheel.engine.api",
    "timerwheel.delivery.api",
    "timerwheel.procs.remote_engine",
    "timerwheel.procs.remote_hub",
    "timerwheel.procs.engine_host",
    "timerwheel.procs.delivery_host",
    "timerwheel.procs.ipc",
    "timerwheel.server.service",
    "timerwheel.server.send_requests",
    "timerwheel.server.admin_service",
]


def installed_shape(target: Path) -> None:
    """`target/timerwheel/...` as pip would install it: the root package's files, and each
    room's folder under its name in the namespace (from pyproject's package-dir)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    package = target / "timerwheel"
    package.mkdir()
    for entry in (ROOT / package_dir["timerwheel"]).iterdir():
        os.symlink(entry, package / entry.name)
    for name, folder in package_dir.items():
        if name != "timerwheel":
            os.symlink(ROOT / folder, package / name.removeprefix("timerwheel."))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="timerwheel-types-") as directory:
        installed_shape(Path(directory))
        command = [
            sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
            "--cache-dir", str(Path(directory) / ".mypy_cache"),
        ]  # fmt: skip
        for module in CHECKED:
            command += ["-p", module]
        env = {**os.environ, "MYPYPATH": directory}
        return subprocess.run(command, cwd=directory, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
