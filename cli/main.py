"""`timerwheel` command line: discovers the sub-commands in `timerwheel.cli.commands`.

`timerwheel` alone prints the help; `timerwheel --version` the installed version. Flags
must be spelled out (no abbreviations), and an unknown flag is named in the error with
the nearest known one (`--dealy` -> did you mean --delay?).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.metadata
import pkgutil
import re
import sys

import timerwheel.cli.commands

_NEGATIVE_VALUE = re.compile(r"-\.?\d")  # -5s, -5, -.5s: a value, not a flag


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations, whose errors name a mistyped flag.

    argparse reports a missing required flag before an unknown one, so `send --dealy 5s`
    would say "one of --delay --at --level is required" and never mention `--dealy`.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._seen: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._seen = list(sys.argv[1:] if args is None else args)
        args = self._join_negative_values(self._seen)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a command's leftovers: say it here
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _join_negative_values(self, tokens: list[str]) -> list[str]:
        """`--delay -5s` -> `--delay=-5s`, so the flag's own check says what is wrong.

        argparse takes a token that starts with `-` for a flag, not a value (it makes an
        exception only for plain negative numbers), and would say "--delay: expected one
        argument". Joined, the value reaches the flag's parser, which names it
        ("--delay=-5s: a negative delay ...").
        """
        joined: list[str] = []
        index = 0
        while index < len(tokens):
            token = tokens[index]
            action = self._option_string_actions.get(token)
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            if (
                action is not None
                and action.nargs is None  # exactly one value (store_true has nargs=0)
                and _NEGATIVE_VALUE.match(following)
            ):
                joined.append(f"{token}={following}")
                index += 2
                continue
            if token == "--":  # everything after it is positional already
                joined.extend(tokens[index:])
                break
            joined.append(token)
            index += 1
        return joined

    def error(self, message: str):
        unknown = [
            token.split("=", 1)[0]
            for token in self._seen
            if token.startswith("--") and token.split("=", 1)[0] not in self._option_string_actions
        ]
        if unknown and self._subparsers is None:  # a command's own parser
            known = [flag for flag in self._option_string_actions if flag.startswith("--")]
            close = difflib.get_close_matches(unknown[0], known, n=1)
            message = f"unknown flag {unknown[0]}" + (
                f" (did you mean {close[0]}?)" if close else ""
            )
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="timerwheel",
        description="Durable timer-message service: RocksDB time wheels behind a gRPC API.",
    )
    parser.add_argument("--version", action="version", version=f"timerwheel {_version()}")
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    for module_info in sorted(
        pkgutil.iter_modules(timerwheel.cli.commands.__path__), key=lambda m: m.name
    ):
        module = importlib.import_module(f"timerwheel.cli.commands.{module_info.name}")
        module.register(subparsers)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("timerwheel")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
