"""Regenerate `timerwheel/v1/*_pb2*.py` from `proto/` with grpcio-tools.

`python -m timerwheel.server.protogen` writes the files; `--check` exits 1 when the committed files
differ from what the .proto would generate (a test runs the check).
"""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "timerwheel" / "v1" / "timerwheel.proto"
GENERATED = ("timerwheel_pb2.py", "timerwheel_pb2.pyi", "timerwheel_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    args = [
        "protoc", f"-I{PROTO_ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}", str(PROTO),
    ]  # fmt: skip
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def stale_files() -> list[str]:
    """Generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "timerwheel" / "v1"
        committed = ROOT / "timerwheel" / "v1"
        return [
            name
            for name in GENERATED
            if not (committed / name).exists()
            or not filecmp.cmp(fresh / name, committed / name, shallow=False)
        ]


def main() -> int:
    if "--check" in sys.argv:
        stale = stale_files()
        if stale:
            print(
                f"stale generated code: {', '.join(stale)}; "
                "run python -m timerwheel.server.protogen"
            )
            return 1
        return 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
