"""The flags every client command shares to reach a secured server (docs/security.md).

--tls-ca FILE                 CA of the server's certificate (turns TLS on)
--tls                         TLS with the system's trusted roots instead
--tls-cert FILE --tls-key FILE   the client's certificate, for mutual TLS
--token-file FILE             bearer token (else $TIMERWHEEL_TOKEN)
"""

from __future__ import annotations

import argparse
import os

TOKEN_ENV = "TIMERWHEEL_TOKEN"


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("secured server (TLS, token)")
    group.add_argument("--tls-ca", metavar="FILE", help="CA certificate of the server (PEM)")
    group.add_argument("--tls", action="store_true", help="TLS with the system's trusted CAs")
    group.add_argument("--tls-cert", metavar="FILE", help="client certificate for mutual TLS")
    group.add_argument("--tls-key", metavar="FILE", help="key of --tls-cert")
    group.add_argument(
        "--token-file", metavar="FILE", help=f"file holding the bearer token (else ${TOKEN_ENV})"
    )


def connection_from_args(args: argparse.Namespace, env=None):
    """The `timerwheel.Connection` the flags ask for; ValueError naming the flag when they
    are wrong."""
    from timerwheel.credentials import Connection, Tls  # grpc only when a command runs

    env = os.environ if env is None else env
    for flag in ("tls_ca", "tls_cert", "tls_key"):
        path = getattr(args, flag)
        if path and not os.path.isfile(path):
            raise ValueError(f"--{flag.replace('_', '-')}={path!r}: no such file")
    tls = None
    if args.tls or args.tls_ca or args.tls_cert or args.tls_key:
        if bool(args.tls_cert) != bool(args.tls_key):
            raise ValueError("--tls-cert and --tls-key go together (give both or neither)")
        tls = Tls(ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key)
    return Connection(tls=tls, token=_token(args.token_file, env))


def _token(path: str | None, env) -> str | None:
    if not path:
        return env.get(TOKEN_ENV) or None
    try:
        with open(path) as file:
            token = file.read().strip()
    except OSError as exc:
        raise ValueError(f"--token-file={path!r}: cannot read it: {exc.strerror}") from exc
    if not token:
        raise ValueError(f"--token-file={path!r}: the file is empty")
    return token
