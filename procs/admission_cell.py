"""The engine process's admission verdict, shared with the gRPC workers through one file.

Under `serve --workers N` the firing loop runs in the engine process, but sends are
validated in the workers, so a worker must refuse a send (`timerwheel.wheels.admission`)
before it validates it, without asking the engine first: a call per send would cost
the engine process more than the refusal saves. So the verdict lives in one 8-byte
word of a file beside the engine's socket (in the supervisor's private runtime
directory), mapped by every process:

    engine process, writer thread                 each worker, before each send
    tick stage -> publish(refusing, lag_ms, load_pct)    read the word: refusing? why?
      word = lag_ms << 17 | load_pct << 1 | refusing     (no call, no lock)

`load_pct` is not 0 only while the due-load rule refuses (and the fire-lag rule does
not): the projected load, in % of a core, that a refusal names
(`timerwheel.wheels.admission`, "admission by due load"); otherwise a refusal is the
fire-lag rule's and names `lag_ms`.

The writer writes the word only when it changed. An aligned 8-byte store is one machine
store, so a reader sees the old word or the new one, never half of each. A worker that
starts before the engine made the file admits until it is there; an engine process that
restarts maps the same file again, so the workers' mappings stay good.
"""

from __future__ import annotations

import mmap
import os
import struct

from timerwheel.wheels.admission import due_load_refused, refused
from timerwheel.wheels.domain import AdmissionRefused

_WORD = struct.Struct("<q")
_LOAD_BITS = 16  # load_pct, capped: a refusal names at most 65535%
SUFFIX = ".admission"


def cell_path(engine_socket_path: str) -> str:
    return engine_socket_path + SUFFIX


class AdmissionPublisher:
    """The engine process's end: `publish` is the tick's `on_admission`."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _WORD.size:
                os.ftruncate(fd, _WORD.size)
            self._map = mmap.mmap(fd, _WORD.size)
        finally:
            os.close(fd)
        self._word = -1
        self.publish(False, 0)

    def publish(self, refusing: bool, lag_ms: int, load_pct: int = 0) -> None:
        load = min(load_pct, (1 << _LOAD_BITS) - 1)
        word = (lag_ms << _LOAD_BITS | load) << 1 | refusing
        if word != self._word:
            self._word = word
            _WORD.pack_into(self._map, 0, word)

    def close(self) -> None:
        """Admit again (the engine is going away: sends meet UNAVAILABLE instead)."""
        self.publish(False, 0)
        self._map.close()


class AdmissionReader:
    """A worker's end: `refused()` before each send."""

    def __init__(self, path: str, admit_ms: int, admit_load_pct: int = 0) -> None:
        self._path = path
        self._admit_ms = admit_ms
        self._admit_load_pct = admit_load_pct
        self._map: mmap.mmap | None = None

    def refusal(self) -> str | None:
        """Why a send is refused now, or None (also while the engine has no file yet)."""
        refused = self.refused()
        return None if refused is None else str(refused)

    def refused(self) -> AdmissionRefused | None:
        """The error a send meets now (as the engine's own gate would raise), or None."""
        cell = self._map or self._open()
        if cell is None:
            return None
        (word,) = _WORD.unpack_from(cell, 0)
        if not word & 1:
            return None
        load_pct = word >> 1 & (1 << _LOAD_BITS) - 1
        if load_pct:
            return due_load_refused(load_pct, self._admit_load_pct)
        return refused(word >> (_LOAD_BITS + 1), self._admit_ms)

    def _open(self) -> mmap.mmap | None:
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size < _WORD.size:
                return None
            self._map = mmap.mmap(fd, _WORD.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        return self._map

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
