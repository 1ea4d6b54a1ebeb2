"""How one cluster node calls another (forwarding, fan-in, scatter-gather: all through
`timerwheel.server.forwarding`'s channels): in plain text when the node serves plain
text, over TLS when it serves TLS.

Over TLS a node checks the other's certificate against `--cluster-ca` (the system's
trusted roots without it) and the address the other advertises, and presents its own
`--tls-cert`, so a cluster that requires client certificates (`--tls-client-ca`) admits
its own nodes: their certificates then need both uses, server and client authentication.
The caller's token rides on in the call's metadata, and the owner checks it again.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from timerwheel.security.settings import SecuritySettings


def peer_credentials(
    security: SecuritySettings, ca_file: str | None
) -> grpc.ChannelCredentials | None:
    """The credentials of calls to other nodes; None when this node serves plain text."""
    if not security.tls_cert_file:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=Path(ca_file).read_bytes() if ca_file else None,
        private_key=Path(security.tls_key_file).read_bytes() if security.tls_key_file else None,
        certificate_chain=Path(security.tls_cert_file).read_bytes(),
    )
