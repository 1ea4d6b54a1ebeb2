"""What a built wheel carries besides the code: the licence, the typing marker, the .proto.

A user who installs the wheel gets the licence in its dist-info (PEP 639), `py.typed` so
type checkers read the client's annotations (PEP 561), and `timerwheel/v1/timerwheel.proto`,
the contract the generated code came from (server/protogen.py keeps the copy equal to
proto/'s). The metadata names the licence and the classifiers. Builds a wheel with pip
(and its isolated build environment), hence the system tier.
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("timerwheel-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def dist_info(wheel: zipfile.ZipFile) -> str:
    (name,) = {n.split("/")[0] for n in wheel.namelist() if ".dist-info/" in n}
    return name


def test_the_wheel_carries_the_licence_the_marker_and_the_proto(wheel):
    names = set(wheel.namelist())
    licence = f"{dist_info(wheel)}/licenses/LICENSE"
    assert licence in names
    text = wheel.read(licence).decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "Copyright 2026 the timerwheel authors" in text
    assert "timerwheel/py.typed" in names
    assert "timerwheel/v1/timerwheel_pb2.pyi" in names
    shipped = wheel.read("timerwheel/v1/timerwheel.proto")
    assert shipped == (ROOT / "proto" / "timerwheel" / "v1" / "timerwheel.proto").read_bytes()


def test_the_metadata_names_the_licence_and_classifiers(wheel):
    metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info(wheel)}/METADATA").decode())
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = set(metadata.get_all("Classifier"))
    assert {
        "Programming Language :: Python :: 3.11",
        "Operating System :: POSIX :: Linux",
        "Topic :: System :: Distributed Computing",
        "Typing :: Typed",
    } <= classifiers
    # PEP 639: the licence is the expression alone, never a License :: classifier too.
    assert not any(c.startswith("License ::") for c in classifiers)
    assert "grpc" in metadata["Keywords"].split(",")
