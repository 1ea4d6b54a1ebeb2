"""The server's security, checked and loaded once before anything is opened or bound.

`load_protection` runs first in every way the server starts (`TimerServer`, and
`timerwheel serve` before its supervisor spawns anything): the exposure rules (a
non-loopback host needs TLS and tokens, or `insecure`; a non-loopback console or /metrics
needs `insecure`), the token file, the TLS files
and the export root. Any problem is a SettingsError naming the setting and the value.
The result is picklable, so the gRPC worker processes receive the loaded tokens rather
than reading the file again; each worker builds its own TLS credentials (`listen`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import grpc
import structlog

from timerwheel.security.settings import (
    SecuritySettings,
    console_exposure_check,
    exposure_check,
    metrics_exposure_check,
)
from timerwheel.security.tls import server_credentials
from timerwheel.security.tokens import TokenTable, load_tokens
from timerwheel.wheels.settings import SettingsError

log = structlog.get_logger("timerwheel.server")


@dataclass(frozen=True)
class Protection:
    security: SecuritySettings
    tokens: TokenTable | None = None  # None: no authentication
    exposure_warning: str | None = None  # logged at start (an --insecure exposed bind)
    console_warning: str | None = None  # likewise for an exposed web console
    metrics_warning: str | None = None  # and for an exposed /metrics


UNPROTECTED = Protection(SecuritySettings())  # loopback, as before security existed


def load_protection(
    host: str,
    security: SecuritySettings,
    console_host: str | None = None,
    metrics_host: str | None = None,
) -> Protection:
    """`console_host`, `metrics_host`: where the web console and /metrics will listen
    (None: off)."""
    warning = exposure_check(host, security)
    console_warning = metrics_warning = None
    if console_host is not None:
        console_warning = console_exposure_check(console_host, security)
    if metrics_host is not None:
        metrics_warning = metrics_exposure_check(metrics_host, security)
    tokens = load_tokens(security.auth_tokens_file) if security.auth else None
    server_credentials(security)  # reads the PEM files now: a bad one stops the start here
    if security.export_root and not os.path.isdir(security.export_root):
        raise SettingsError(
            f"export_root={security.export_root!r}: not a directory; create it first"
        )
    return Protection(security, tokens, warning, console_warning, metrics_warning)


def listen(server: grpc.Server, address: str, security: SecuritySettings) -> int:
    """Bind `server` to `address`, with TLS when configured; the port bound."""
    credentials = server_credentials(security)
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from exc


def log_protection(protection: Protection) -> None:
    """The start-up lines of docs/security.md: `security`, and the warnings."""
    security, tokens = protection.security, protection.tokens
    log.info(
        "security", tls=security.tls, mutual_tls=bool(security.tls_client_ca_file),
        tokens=len(tokens.entries) if tokens else 0, export_root=security.export_root or None,
    )  # fmt: skip
    if protection.exposure_warning:
        log.warning("insecure_bind", message=protection.exposure_warning)
    if protection.console_warning:
        log.warning("insecure_console", message=protection.console_warning)
    if protection.metrics_warning:
        log.warning("insecure_metrics", message=protection.metrics_warning)
    if tokens and tokens.plain_names:
        log.warning(
            "plain_tokens", tokens=list(tokens.plain_names),
            message="the token file holds plain tokens; store sha256 = <hex> instead",
        )  # fmt: skip
