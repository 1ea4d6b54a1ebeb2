"""Security settings: TLS files, the token file, the export root, and the exposure rule.

A frozen dataclass validated once, like `timerwheel.wheels.settings.Settings`; every message shows
the bad value. Only names and numbers live here: reading the files (certificates, the
token TOML) is the server's job (`timerwheel.security.tokens`, `timerwheel.server.app`), so this
module stays free of I/O. `exposure_check` is the rule that keeps a server from being reachable from
the network without protection (docs/security.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from timerwheel.common import is_loopback_host
from timerwheel.wheels.settings import SettingsError

GIB = 1024**3


@dataclass(frozen=True)
class SecuritySettings:
    # TLS: the server's certificate chain and key (PEM). Both or neither.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # Mutual TLS: clients must present a certificate signed by this CA (PEM).
    tls_client_ca_file: str = ""
    # Bearer tokens and their roles (TOML, see timerwheel.security.tokens). Empty: no
    # authentication.
    auth_tokens_file: str = ""
    # Allow a non-loopback bind without TLS and tokens (logged as a warning at start).
    insecure: bool = False
    # TimerAdmin.Export writes only under this directory; empty: Export is switched off.
    export_root: str = ""
    # An export is refused when it would leave less free space than this on the disk.
    export_reserve_bytes: int = GIB
    # Calls one caller (token, else connection) may have waiting for a thread of the unary
    # pool, and of the settle pool, beyond the share it runs (timerwheel.security.fair_pool):
    # past it a call is refused at once with RESOURCE_EXHAUSTED, so one token's flood cannot
    # fill grpcio's max_concurrent_rpcs, past which every caller is refused.
    max_queued_calls_per_caller: int = 64

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingsError(
                f"tls_cert_file={self.tls_cert_file!r}, tls_key_file={self.tls_key_file!r}: "
                "give both (--tls-cert and --tls-key) or neither"
            )
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise SettingsError(
                f"tls_client_ca_file={self.tls_client_ca_file!r}: mutual TLS needs the "
                "server's own certificate too (--tls-cert and --tls-key)"
            )
        reserve = self.export_reserve_bytes
        if not isinstance(reserve, int) or isinstance(reserve, bool) or reserve < 0:
            raise SettingsError(f"export_reserve_bytes={reserve!r}: must be an integer >= 0")
        queued = self.max_queued_calls_per_caller
        if not isinstance(queued, int) or isinstance(queued, bool) or queued < 1:
            raise SettingsError(f"max_queued_calls_per_caller={queued!r}: must be an integer >= 1")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def auth(self) -> bool:
        return bool(self.auth_tokens_file)

    def replace(self, **changes: object) -> SecuritySettings:
        return dataclasses.replace(self, **changes)


def exposure_check(host: str, security: SecuritySettings) -> str | None:
    """Refuse (SettingsError) a non-loopback bind that lacks TLS or tokens, unless
    `insecure`; then return the warning to log at start. None when nothing is wrong."""
    if is_loopback_host(host) or (security.tls and security.auth):
        return None
    missing = " and ".join(
        name
        for name, present in (("TLS (--tls-cert/--tls-key)", security.tls),
                              ("tokens (--auth-tokens)", security.auth))
        if not present
    )  # fmt: skip
    if not security.insecure:
        raise SettingsError(
            f"host={host!r}: not a loopback address, and the server has no {missing}; "
            "anyone who can reach the port could read, cancel and take every message. "
            "Add them, bind 127.0.0.1, or give --insecure to serve like this anyway"
        )
    return f"serving {host!r} without {missing} (--insecure): anyone who reaches it has full access"


def console_exposure_check(console_host: str, security: SecuritySettings) -> str | None:
    """The web console's rule (docs/console.md): it serves plain HTTP and dials the API in
    plain text, so it is refused next to TLS, and off loopback unless `insecure` (then
    the warning to log at start)."""
    if security.tls:
        raise SettingsError(
            "console_port: the web console cannot reach a server that serves TLS yet (it "
            "dials the API in plain text on loopback); leave --console-port off with --tls-cert"
        )
    if is_loopback_host(console_host):
        return None
    if not security.insecure:
        raise SettingsError(
            f"console_host={console_host!r}: not a loopback address, and the console serves "
            "plain HTTP: tokens and messages would cross the network in clear text. Bind "
            "127.0.0.1 (reach it through an SSH tunnel), or give --insecure"
        )
    return f"console on {console_host!r} over plain HTTP (--insecure): tokens travel in clear text"


def metrics_exposure_check(metrics_host: str, security: SecuritySettings) -> str | None:
    """The console's rule for /metrics (docs/metrics.md): plain HTTP without tokens, so
    off loopback only with `insecure` (then the warning to log at start). It shows no
    message, yet every topic's name and backlog: not for anyone who can reach a port."""
    if is_loopback_host(metrics_host):
        return None
    if not security.insecure:
        raise SettingsError(
            f"metrics_host={metrics_host!r}: not a loopback address, and /metrics serves "
            "plain HTTP without tokens: anyone who reaches it reads every topic's name and "
            "backlog. Bind 127.0.0.1 (scrape through a tunnel or a local agent), or give "
            "--insecure"
        )
    return (
        f"metrics on {metrics_host!r} over plain HTTP without tokens (--insecure): anyone who "
        "reaches it reads topic names and backlogs"
    )
