"""The server's TLS credentials, from PEM files, by grpcio's own `ssl_server_credentials`."""

from __future__ import annotations

import grpc

from timerwheel.security.settings import SecuritySettings
from timerwheel.wheels.settings import SettingsError


def read_pem(name: str, path: str) -> bytes:
    """A PEM file's bytes; SettingsError naming the setting and the path otherwise."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise SettingsError(f"{name}={path!r}: cannot read it: {exc.strerror}") from exc
    if b"-----BEGIN " not in data:
        raise SettingsError(f"{name}={path!r}: not a PEM file (no -----BEGIN line)")
    return data


def server_credentials(security: SecuritySettings) -> grpc.ServerCredentials | None:
    """None without TLS. With `tls_client_ca_file`, clients must present a certificate
    that CA signed (mutual TLS); the handshake refuses any other before a call is made."""
    if not security.tls:
        return None
    pair = (
        read_pem("tls_key_file", security.tls_key_file),
        read_pem("tls_cert_file", security.tls_cert_file),
    )
    client_ca = (
        read_pem("tls_client_ca_file", security.tls_client_ca_file)
        if security.tls_client_ca_file
        else None
    )
    try:
        return grpc.ssl_server_credentials(
            [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
        )
    except Exception as exc:  # grpcio rejects an unusable key/cert pair here
        raise SettingsError(
            f"tls_cert_file={security.tls_cert_file!r}, tls_key_file={security.tls_key_file!r}: "
            f"not a usable certificate and key: {exc}"
        ) from exc
