"""How a node joins a cluster (`timerwheel serve --cluster`), and where it keeps its index."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from timerwheel.cluster.lease import LeaseTerms
from timerwheel.cluster.partitions import DEFAULT_PARTITIONS, check_partition_count
from timerwheel.wheels.settings import SettingsError


@dataclass(frozen=True)
class NodeSettings:
    """How this node joins the cluster; validated once, the bad value in the message."""

    name: str
    nats_urls: tuple[str, ...]
    partitions: int = DEFAULT_PARTITIONS
    replicas: int = 3
    lease: LeaseTerms = field(default_factory=LeaseTerms)
    tick_ms: int = 100
    call_timeout_ms: int = 2_000
    takeover_grace_ms: int = 3_000

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or "." in self.name:
            raise SettingsError(f"node name {self.name!r}: non-empty, without '/' or '.'")
        if not self.nats_urls:
            raise SettingsError("cluster: at least one NATS url (--cluster nats://host:4222)")
        try:
            check_partition_count(self.partitions)
        except ValueError as error:
            raise SettingsError(str(error)) from error
        if self.replicas not in (1, 3, 5):
            raise SettingsError(f"replicas {self.replicas}: 1, 3 or 5")
        if not 10 <= self.tick_ms <= self.lease.renew_every_ms:
            raise SettingsError(
                f"tick_ms {self.tick_ms}: 10 to the renewal interval "
                f"({self.lease.renew_every_ms} ms)"
            )


def index_dir(data_dir: str) -> str:
    """Where a cluster node keeps its engine: emptied at every start (the log is the truth;
    what an earlier process left may be ahead of it)."""
    path = Path(data_dir) / "cluster-index"
    shutil.rmtree(path, ignore_errors=True)
    return str(path)
