"""The README's examples must not rot: every client command of its ```sh blocks runs, in
order, against a real server and must exit 0; every other `timerwheel` line must parse;
the Python example runs too, and prints what the README says it does."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from timerwheel.cli.main import build_parser, main

README = Path(__file__).resolve().parents[2] / "README.md"
CLIENT_COMMANDS = {"send", "get", "cancel", "list", "stats", "tail", "reschedule", "count"}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def _command_lines() -> list[list[str]]:
    """Each `timerwheel ...` line of the sh blocks as argv (continuations joined)."""
    lines = []
    for block in _blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            # `[--master URL]` marks an optional flag: left out
            words = shlex.split(re.sub(r"\[[^\]]*\]", "", line), comments=True)
            if words[:1] == ["timerwheel"]:
                lines.append(words[1:])
    return lines


def test_the_readme_has_client_commands_to_run():
    commands = {argv[0] for argv in _command_lines()}
    assert {"send", "get", "cancel", "list", "stats", "tail"} <= commands


def test_every_readme_client_command_runs_against_a_server(server, capsys):
    for argv in _command_lines():
        if argv[0] not in CLIENT_COMMANDS:
            continue
        code = main([*argv, "--target", server.target])
        out, err = capsys.readouterr()
        assert code == 0, f"timerwheel {shlex.join(argv)} exited {code}: {err}"
        if argv[:2] == ["cancel", "order-42"]:
            assert "CANCELLED" in out
    # the re-send after the cancel says what happened, as the README promises
    assert main(["send", *_first("send", "--id"), "--target", server.target]) == 0
    assert "order-42 already existed (CANCELLED)" in capsys.readouterr().out


def _first(command: str, flag: str) -> list[str]:
    return next(a[1:] for a in _command_lines() if a[0] == command and flag in a)


def test_every_other_readme_command_line_parses():
    parser = build_parser()
    for argv in _command_lines():
        if argv[0] in CLIENT_COMMANDS:
            continue
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"timerwheel {shlex.join(argv)}: does not parse ({exc})")


def test_the_python_example_runs_and_prints_its_own_message(server, capsys):
    """It sends a message due in 2 s, prints its state, then consumes until that message
    comes: the output is the state, then the message, well before the example gives up."""
    [example] = _blocks("python")
    assert "127.0.0.1:7070" in example
    started = time.monotonic()
    exec(compile(example.replace("127.0.0.1:7070", server.target), "README", "exec"), {})
    elapsed = time.monotonic() - started
    lines = [line for line in capsys.readouterr().out.splitlines() if not _is_log(line)]
    assert lines[0] == "SCHEDULED"
    assert re.fullmatch(r"\S+ 1 b'pay #42'", lines[1]), lines
    assert len(lines) == 2, lines
    assert 1.5 < elapsed < 20, f"the example took {elapsed:.1f} s"  # due in 2 s, not the 30 s


def _is_log(line: str) -> bool:
    """The in-process server's log lines, printed to the same stdout."""
    return line.startswith("{") or bool(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[", line))
