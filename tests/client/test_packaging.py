"""The house's street plan: one installed namespace, rooms whose imports point down, and a
client that needs nothing of the server.

1. `pip install` puts one top-level package into site-packages, `timerwheel`: a room's
   folder at the top of the repo (store/, engine/, ...) is importable only as
   `timerwheel.<room>` (pyproject's package-dir), never under its bare name.
2. pyproject's package list and the folders on disk agree, so a new subpackage cannot be
   left out of a wheel.
3. Imports point down the layers below; nothing imports the command line (cli/) but
   itself; the client modules import no room.
4. Importing the client, as a user does, loads no module of the server nor its libraries.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
ROOMS = {name.removeprefix("timerwheel."): folder for name, folder in PACKAGE_DIR.items()}
del ROOMS["timerwheel"]

# Lowest first: a room may import the rooms before it, never one after it. The client
# package (timerwheel/: the public vocabulary, the clients, the protos) is below them all.
LAYERS = [
    "wheels", "store", "observability", "engine", "cluster", "security", "delivery", "console",
    "server", "procs", "loadtest", "capacity", "cli",
]  # fmt: skip


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_layers_name_every_room():
    assert sorted(LAYERS) == sorted(ROOMS)


def test_one_top_level_package_is_installed():
    top_level = importlib.metadata.distribution("timerwheel").read_text("top_level.txt")
    assert (top_level or "").split() == ["timerwheel"]


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_a_room_is_importable_only_inside_the_namespace(room, tmp_path):
    """Run outside the repo, where the current directory cannot lend its folders."""
    inside = run_python(f"import timerwheel.{room}", tmp_path)
    assert inside.returncode == 0, inside.stderr
    bare = run_python(f"import {room}", tmp_path)
    assert bare.returncode != 0
    assert f"No module named '{room}'" in bare.stderr


def test_pyproject_lists_every_package_folder():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = set()
    for name, folder in PACKAGE_DIR.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            found.add(".".join([name, *relative.parts]))
    assert found == listed
    # and every top-level folder of Python code is a room, bar the lab's and the tests'
    python_folders = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert python_folders - {"bench"} == set(PACKAGE_DIR.values())


def imported_rooms(path: Path) -> set[str]:
    """The rooms (or "client") a module imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] != "timerwheel":
                continue
            found.add(parts[1] if len(parts) > 1 and parts[1] in ROOMS else "client")
    return found


def modules_of(folder: str) -> list[Path]:
    return [p for p in (ROOT / folder).rglob("*.py") if "v1" not in p.parts]


@pytest.mark.parametrize("room", LAYERS)
def test_a_room_imports_only_the_rooms_below_it(room):
    allowed = {*LAYERS[: LAYERS.index(room) + 1], "client"}
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_rooms(path) - allowed)
        for path in modules_of(ROOMS[room])
        if imported_rooms(path) - allowed
    }
    assert wrong == {}


def test_the_client_modules_import_no_room():
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_rooms(path) - {"client"})
        for path in modules_of("timerwheel")
        if imported_rooms(path) - {"client"}
    }
    assert wrong == {}


def test_importing_the_client_loads_nothing_of_the_server(tmp_path):
    code = (
        "import sys, timerwheel\n"
        "timerwheel.Client, timerwheel.AsyncClient, timerwheel.Producer, timerwheel.Tls\n"
        "timerwheel.State, timerwheel.AckSender, timerwheel.Message, timerwheel.v1\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    rooms = sorted(m for m in loaded if m.split(".")[:2][-1] in ROOMS and "." in m)
    assert rooms == []
    server_libraries = {"rocksdict", "structlog", "starlette", "uvicorn", "prometheus_client"}
    assert loaded & server_libraries == set()
    assert "grpc" in loaded  # it did load the client
