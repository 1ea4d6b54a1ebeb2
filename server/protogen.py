"""Regenerate `timerwheel/v1/*_pb2*.py` from `proto/` with grpcio-tools.

`python -m timerwheel.server.protogen` writes the files, and copies the .proto next to
them (`timerwheel/v1/timerwheel.proto`) so the wheel ships the contract its code was
generated from (package-data): a user can hand it to protoc or grpcurl without the
repository. `proto/` stays the source of truth; `--check` exits 1 when the committed
files, the copy included, differ from what it would write (a test runs the check).
"""

from __future__ import annotations

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "timerwheel" / "v1" / "timerwheel.proto"
GENERATED = ("timerwheel_pb2.py", "timerwheel_pb2.pyi", "timerwheel_pb2_grpc.py")
SHIPPED_PROTO = ROOT / "timerwheel" / "v1" / PROTO.name  # the copy the wheel carries


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    args = [
        "protoc", f"-I{PROTO_ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}", str(PROTO),
    ]  # fmt: skip
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def stale_files() -> list[str]:
    """Generated files that differ from a fresh generation, and the shipped copy of the
    .proto if it differs from proto/'s."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "timerwheel" / "v1"
        committed = ROOT / "timerwheel" / "v1"
        stale = [
            name
            for name in GENERATED
            if not (committed / name).exists()
            or not filecmp.cmp(fresh / name, committed / name, shallow=False)
        ]
    if not SHIPPED_PROTO.exists() or not filecmp.cmp(PROTO, SHIPPED_PROTO, shallow=False):
        stale.append(PROTO.name)
    return stale


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
    shutil.copyfile(PROTO, SHIPPED_PROTO)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
