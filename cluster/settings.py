"""How a node joins a cluster (`timerwheel serve --cluster`), and where it keeps its index."""

from __future__ import annotations

import os
import shutil
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from timerwheel.cluster.lease import LeaseTerms
from timerwheel.cluster.partitions import DEFAULT_PARTITIONS, check_partition_count
from timerwheel.wheels.settings import SettingsError

MIB = 1 << 20


@dataclass(frozen=True)
class SnapshotTerms:
    """When an owner snapshots a partition (docs/cluster.md, "The bounded log"): once the
    log above the latest snapshot holds `records` records or `bytes` bytes, whichever
    comes first. A takeover then replays at most that much, plus what was appended while
    the snapshot was taken. Small values are for tests."""

    records: int = 1_000_000
    bytes: int = 256 * MIB
    retry_ms: int = 5_000  # after a snapshot failed, the next try waits this long

    def __post_init__(self) -> None:
        if not 1 <= self.records <= 100_000_000:
            raise SettingsError(f"snapshot records {self.records}: 1 to 100,000,000")
        if not 1_024 <= self.bytes <= 64 * 1024 * MIB:
            raise SettingsError(f"snapshot bytes {self.bytes}: 1 KiB to 64 GiB")
        if not 100 <= self.retry_ms <= 600_000:
            raise SettingsError(f"snapshot retry_ms {self.retry_ms}: 100 to 600,000")

    def due(self, records: int, size: int) -> bool:
        return records >= self.records or size >= self.bytes

    @classmethod
    def from_env(cls) -> SnapshotTerms:
        """The defaults, or `TIMERWHEEL_CLUSTER_SNAPSHOT_RECORDS` / `_BYTES` where set (a
        fault suite's small values: `timerwheel serve` has no flag for them)."""
        given = {}
        for name in ("records", "bytes"):
            value = os.environ.get(f"TIMERWHEEL_CLUSTER_SNAPSHOT_{name.upper()}")
            if value:
                try:
                    given[name] = int(value)
                except ValueError as error:
                    raise SettingsError(f"snapshot {name} {value!r}: a whole number") from error
        return cls(**given)


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
    snapshot: SnapshotTerms = field(default_factory=SnapshotTerms.from_env)
    # The address other nodes and clients reach this node at (HOST, or HOST:PORT): what
    # its leases and the cluster map advertise. "": the address it listens on, which must
    # then be a reachable one (not 0.0.0.0 or ::).
    advertise: str = ""
    # With TLS on (`--tls-cert`), the CA that signed the other nodes' certificates, for
    # the calls nodes make to each other (None: the system's trusted roots).
    peer_ca_file: str | None = None
    # How the node proves itself to NATS and checks the servers (docs/cluster.md, "NATS
    # credentials and TLS"): a user credentials file (`--nats-creds`), the CA of the
    # servers' certificates (`--nats-ca`: TLS required), a client certificate and key for
    # mutual TLS. A user and password or a token go in the URLs (nats://u:p@host:4222).
    nats_creds_file: str | None = None
    nats_ca_file: str | None = None
    nats_cert_file: str | None = None
    nats_key_file: str | None = None

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
        if self.advertise:
            host, port = split_host_port(self.advertise)
            if not host or is_wildcard(host) or (port is not None and not 0 < port < 65536):
                raise SettingsError(
                    f"advertise {self.advertise!r}: a host other nodes and clients can "
                    "reach, with an optional :PORT (e.g. 10.0.0.5 or node1.example.com:7070)"
                )
        if not 10 <= self.tick_ms <= self.lease.renew_every_ms:
            raise SettingsError(
                f"tick_ms {self.tick_ms}: 10 to the renewal interval "
                f"({self.lease.renew_every_ms} ms)"
            )
        if self.peer_ca_file is not None and not os.access(self.peer_ca_file, os.R_OK):
            raise SettingsError(f"cluster_ca {self.peer_ca_file!r}: not a readable file")
        self._check_nats_access()

    def _check_nats_access(self) -> None:
        """Each NATS file readable and of its kind, named by its flag (at start, not at the
        first connect)."""
        files = {
            "--nats-creds": self.nats_creds_file, "--nats-ca": self.nats_ca_file,
            "--nats-cert": self.nats_cert_file, "--nats-key": self.nats_key_file,
        }  # fmt: skip
        for flag, path in files.items():
            if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise SettingsError(f"{flag} {path!r}: not a readable file")
        if (self.nats_cert_file is None) != (self.nats_key_file is None):
            raise SettingsError(
                f"--nats-cert {self.nats_cert_file!r}, --nats-key {self.nats_key_file!r}: "
                "give both (a client certificate and its key, for mutual TLS) or neither"
            )
        if self.nats_creds_file is not None:
            with open(self.nats_creds_file, "rb") as creds:
                text = creds.read()
            if b"BEGIN NATS USER JWT" not in text or b"BEGIN USER NKEY SEED" not in text:
                raise SettingsError(
                    f"--nats-creds {self.nats_creds_file!r}: not a NATS user credentials "
                    "file (a user JWT and an nkey seed, as `nsc generate creds` writes)"
                )
        self.nats_tls()

    @property
    def nats_tls_wanted(self) -> bool:
        return self.nats_ca_file is not None or self.nats_cert_file is not None

    def nats_tls(self) -> ssl.SSLContext | None:
        """The TLS context for NATS (None without `--nats-ca` or `--nats-cert`: plain, or
        the system's roots if a server asks for TLS). Raises SettingsError naming the flag
        whose file it cannot load."""
        if not self.nats_tls_wanted:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.nats_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.nats_ca_file)
            except (ssl.SSLError, OSError) as error:
                raise SettingsError(
                    f"--nats-ca {self.nats_ca_file!r}: not a PEM CA certificate ({error})"
                ) from error
        if self.nats_cert_file is not None and self.nats_key_file is not None:
            try:
                context.load_cert_chain(self.nats_cert_file, self.nats_key_file)
            except (ssl.SSLError, OSError) as error:
                raise SettingsError(
                    f"--nats-cert {self.nats_cert_file!r}, --nats-key {self.nats_key_file!r}: "
                    f"not a PEM certificate and its key ({error})"
                ) from error
        return context

    def advertised(self, host: str, port: int) -> str:
        """Where this node is reached, listening on `host`:`port`. Raises SettingsError
        when that is a wildcard address and nothing else was advertised."""
        if not self.advertise:
            if is_wildcard(host):
                raise SettingsError(
                    f"host {host!r} cannot be reached at that address: give --advertise "
                    "HOST (where other nodes and clients reach this node)"
                )
            return join_host_port(host, port)
        host, given_port = split_host_port(self.advertise)
        return join_host_port(host, port if given_port is None else given_port)


def split_host_port(text: str) -> tuple[str, int | None]:
    """HOST, HOST:PORT, [V6] or [V6]:PORT (a bare V6 address has no port); a port that
    is not a number is -1."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, _port(rest[1:]) if rest.startswith(":") else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(port)
    return text, None


def _port(text: str) -> int:
    return int(text) if text.isdigit() else -1


def is_wildcard(host: str) -> bool:
    """An address that means every interface: nobody can call it."""
    return host.strip("[]") in ("", "0.0.0.0", "::")


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def index_dir(data_dir: str) -> str:
    """Where a cluster node keeps its engine: emptied at every start (the log is the truth;
    what an earlier process left may be ahead of it)."""
    path = Path(data_dir) / "cluster-index"
    shutil.rmtree(path, ignore_errors=True)
    return str(path)
