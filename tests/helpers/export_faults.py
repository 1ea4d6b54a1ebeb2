"""Faults injected into an export (timerwheel.store.export_files): a disk that fills at the
end of an SST file, and a worker that breaks. The worker initializers run in the spawned
export workers, so they live here, importable there as `helpers.export_faults` (the
workers get the test process's sys.path, which holds tests/)."""

from __future__ import annotations

from timerwheel.store import export_files

_REAL_WRITER = export_files.SstFileWriter


class FullDiskWriter:
    """Fails like rocksdict does on ENOSPC (the message as a tiny tmpfs gives it)."""

    def __init__(self, options) -> None:
        self._writer = _REAL_WRITER(options=options)

    def open(self, path: str) -> None:
        self._writer.open(path)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._writer[key] = value

    def file_size(self) -> int:
        return self._writer.file_size()

    def finish(self) -> None:
        raise Exception(  # rocksdict raises a bare Exception
            "IO error: No space left on device: While appending to file: x.sst: "
            "No space left on device"
        )


def disk_full_in_worker() -> None:
    export_files.SstFileWriter = FullDiskWriter


def crash_in_worker() -> None:
    def put(self, key, value):
        raise RuntimeError("worker broke on purpose")

    export_files.SstSink.put = put
