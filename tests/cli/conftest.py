"""Fixtures of the command-line tests."""

from __future__ import annotations

import pytest

from timerwheel.cli.main import main


@pytest.fixture
def cli(server, capsys):
    """Run `timerwheel ARGS --target <live server>` (or `target=`); returns (exit code,
    stdout, stderr) of that run alone."""

    def run(*args: str, target: str | None = None) -> tuple[int, str, str]:
        capsys.readouterr()  # drop anything earlier (server logs)
        code = main([*args, "--target", target or server.target])
        out, err = capsys.readouterr()
        return code, out, err

    return run
