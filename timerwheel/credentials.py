"""How a client reaches a secured server: TLS files and a bearer token, as grpcio channels.

    import timerwheel
    client = timerwheel.Client(
        "tw.example.com:7070",
        tls=timerwheel.Tls(ca_file="ca.pem"),            # mutual TLS: cert_file=, key_file=
        token=open("producer.token").read().strip(),
    )

Everything is grpcio's own credentials: `ssl_channel_credentials` for TLS and
`access_token_call_credentials` for the token (it sends `authorization: Bearer <token>`
with every call). grpcio sends call credentials only over a protected channel, so a
token without TLS is allowed only to a loopback address, through
`local_channel_credentials`: a token never crosses a network in clear text.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from timerwheel.common import is_loopback_host


@dataclass(frozen=True)
class Tls:
    """TLS for a client. `ca_file`: the CA that signed the server's certificate (None:
    the system's trusted roots). `cert_file` + `key_file`: the client's own certificate
    for a server that requires mutual TLS (`serve --tls-client-ca`)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                f"cert_file={self.cert_file!r}, key_file={self.key_file!r}: "
                "a client certificate needs its key (give both or neither)"
            )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )


@dataclass(frozen=True)
class Connection:
    """TLS and token together (what the CLI and the load-test processes pass around)."""

    tls: Tls | None = None
    token: str | None = None


PLAIN = Connection()  # no TLS, no token: a loopback server as it was before security


def open_channel(
    target: str, tls: Tls | bool | None, token: str | None, options: list
) -> grpc.Channel:
    """An insecure channel, a TLS channel, or either carrying the bearer token."""
    credentials = channel_credentials(target, tls, token)
    if credentials is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, credentials, options=options)


def open_aio_channel(
    target: str, tls: Tls | bool | None, token: str | None, options: list
) -> grpc.aio.Channel:
    """`open_channel` for grpc.aio (timerwheel.AsyncClient)."""
    credentials = channel_credentials(target, tls, token)
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, credentials, options=options)


def channel_credentials(
    target: str, tls: Tls | bool | None, token: str | None
) -> grpc.ChannelCredentials | None:
    """The credentials `tls` and `token` ask for; None: a plain channel."""
    if tls is True:
        tls = Tls()
    if not tls and not token:
        return None
    if tls:
        credentials = tls.channel_credentials()
    else:
        if not is_loopback_host(target.rsplit(":", 1)[0]):  # HOST:PORT or [V6]:PORT
            raise ValueError(
                f"target={target!r}: a token is sent only over TLS or to a loopback address; "
                "give tls=timerwheel.Tls(...) (CLI: --tls-ca FILE)"
            )
        credentials = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    if token:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token)
        )
    return credentials


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as file:
        return file.read()
