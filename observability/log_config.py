"""structlog configuration for `timerwheel serve`.

One JSON object per line when stdout is not a terminal (log shippers, tests that read the
server's output), coloured key=value lines on a terminal. Every line carries an ISO UTC
timestamp, the level and the logger name. The service logs one line per lifecycle event
(server_started, engine_opened, delivery_started, server_stopping, ...) and per error,
never one per message: per-message facts belong in Stats, not in logs.
"""

from __future__ import annotations

import contextlib
import logging as stdlib_logging
import os
import sys
from typing import TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "json", "console")


def configure_logging(
    level: str = "info", log_format: str = "auto", stream: TextIO | None = None
) -> None:
    """Route every structlog logger to `stream` (stdout by default), one line per event."""
    if level not in LEVELS:
        raise ValueError(f"log level={level!r}: must be one of {', '.join(LEVELS)}")
    if log_format not in FORMATS:
        raise ValueError(f"log format={log_format!r}: must be one of {', '.join(FORMATS)}")
    stream = _standard_stream(stream)
    as_json = log_format == "json" or (log_format == "auto" and not _is_terminal(stream))
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if as_json:
        renderer = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=_is_terminal(stream))]
    structlog.configure(
        processors=[*shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(stdlib_logging, level.upper())),
        logger_factory=_NamedPrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


class _NamedPrintLoggerFactory:
    """Loggers that remember the name given to `structlog.get_logger(name)`.

    `WriteLogger` writes each line with its newline in one `write` (PrintLogger's `print`
    writes them apart): the server's processes share one stdout, and a pipe keeps a write
    of up to 4 KiB whole, so their lines never interleave.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, *args: object) -> structlog.WriteLogger:
        logger = structlog.WriteLogger(self._stream)
        logger.name = str(args[0]) if args else "timerwheel"
        return logger


class _StdStream:
    """Writes to `sys.stdout` / `sys.stderr` as they are *at write time*.

    Binding the stream object at configure time broke logging once that object was
    replaced and closed (pytest's capture does exactly that between tests).
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def write(self, text: str) -> int:
        stream = getattr(sys, self._name)
        try:
            return stream.write(text)
        except OSError:  # the reader is gone (EPIPE); the server must go on without it
            _to_devnull(stream)
            return len(text)

    def flush(self) -> None:
        stream = getattr(sys, self._name)
        try:
            stream.flush()
        except OSError:
            _to_devnull(stream)

    def isatty(self) -> bool:
        return _is_terminal(getattr(sys, self._name))


def _to_devnull(stream: TextIO) -> None:
    """Point a standard stream whose reader is gone at /dev/null, for good.

    A server's stdout is often a pipe to whatever started it; when that process dies
    (a SIGKILLed `timerwheel loadtest`, a log shipper), every write fails with EPIPE.
    Raised out of a log call, that broke `TimerServer.stop` at its first line, and an
    open Subscribe stream then kept the process alive for ever after SIGTERM. What the
    server logs from then on is lost; it runs, and stops, as without the pipe. (Python's
    own advice for SIGPIPE: dup /dev/null over the descriptor.)
    """
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a test's StringIO)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    with contextlib.suppress(OSError):
        stream.flush()  # what the failed write left buffered goes to /dev/null now


def _standard_stream(stream: TextIO | None) -> TextIO | _StdStream:
    if stream is None or stream is sys.stdout:
        return _StdStream("stdout")
    if stream is sys.stderr:
        return _StdStream("stderr")
    return stream


def _add_logger_name(logger: object, method: str, event: dict) -> dict:
    """structlog.get_logger("timerwheel.engine") -> "logger": "timerwheel.engine"."""
    event.setdefault("logger", getattr(logger, "name", "timerwheel"))
    return event


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
