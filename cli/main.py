"""`timerwheel` command line: discovers the sub-commands in `cli.commands`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import cli.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="timerwheel",
        description="Durable timer-message service: RocksDB time wheels behind a gRPC API.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_info in sorted(pkgutil.iter_modules(cli.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"cli.commands.{module_info.name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
