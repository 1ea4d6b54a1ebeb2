"""Real certificates and a token file for the security tests, made fresh in a temp dir.

`make_pki`: a CA, a server certificate for 127.0.0.1 and localhost, a client certificate
signed by the same CA, and a second, unrelated CA with a client certificate of its own
(the "wrong" client of the mutual-TLS tests). EC P-256 keys: quick to make.

`write_tokens`: a TOML token file in the format of timerwheel.security.tokens, with one token per
role and two limited to the topic prefix `orders.`; returns role name -> plain token.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from timerwheel.security.tokens import sha256_hex


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    wrong_ca: str
    wrong_client_cert: str
    wrong_client_key: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(subject, key, issuer, issuer_key, *, ca: bool, sans=(), usage=None):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if usage:
        usages = list(usage) if isinstance(usage, tuple | list) else [usage]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert, key) -> tuple[str, str]:
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def _ca(directory: Path, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(name), key, _name(name), key, ca=True)
    path, _ = _write(directory, name, cert, key)
    return cert, key, path


def make_pki(directory: Path) -> Pki:
    ca_cert, ca_key, ca_path = _ca(directory, "test-ca")
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    server = _issue(
        _name("timerwheel"), server_key, ca_cert.subject, ca_key,
        ca=False, sans=sans, usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )  # fmt: skip
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(
        _name("client"), client_key, ca_cert.subject, ca_key,
        ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )  # fmt: skip
    wrong_cert, wrong_key, wrong_path = _ca(directory, "wrong-ca")
    intruder_key = ec.generate_private_key(ec.SECP256R1())
    intruder = _issue(
        _name("client"), intruder_key, wrong_cert.subject, wrong_key,
        ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )  # fmt: skip
    server_paths = _write(directory, "server", server, server_key)
    client_paths = _write(directory, "client", client, client_key)
    intruder_paths = _write(directory, "intruder", intruder, intruder_key)
    return Pki(ca_path, *server_paths, *client_paths, wrong_path, *intruder_paths)


def make_node_pki(directory: Path) -> tuple[str, str, str]:
    """A cluster's CA and one node certificate for 127.0.0.1 and localhost, good for both
    ends of a call between nodes (server and client authentication): (ca, cert, key)."""
    ca_cert, ca_key, ca_path = _ca(directory, "cluster-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    sans = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    usages = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    cert = _issue(_name("node"), key, ca_cert.subject, ca_key, ca=False, sans=sans, usage=usages)
    cert_path, key_path = _write(directory, "node", cert, key)
    return ca_path, cert_path, key_path


# role name -> (role, topic prefixes); the names are the token names in the file
TOKEN_ROLES = {
    "producer": ("producer", []),
    "consumer": ("consumer", []),
    "admin": ("admin", []),
    "orders-producer": ("producer", ["orders."]),
    "orders-consumer": ("consumer", ["orders."]),
}


def write_tokens(path: Path, plain: tuple[str, ...] = ()) -> dict[str, str]:
    """Write the token file; names in `plain` are stored as `token = ...`, others hashed."""
    tokens = {name: secrets.token_hex(32) for name in TOKEN_ROLES}
    lines = []
    for name, (role, topics) in TOKEN_ROLES.items():
        secret = f'token = "{tokens[name]}"' if name in plain else (
            f'sha256 = "{sha256_hex(tokens[name])}"'
        )  # fmt: skip
        lines += ["[[tokens]]", f'name = "{name}"', f'role = "{role}"', secret]
        if topics:
            lines.append(f"topics = {topics!r}".replace("'", '"'))
        lines.append("")
    path.write_text("\n".join(lines))
    return tokens


def producer_tokens(path: Path, names: list[str]) -> dict[str, str]:
    """A token file of producers named `names`, each token stored hashed; the tokens."""
    tokens = {name: secrets.token_hex(32) for name in names}
    path.write_text("".join(
        f'[[tokens]]\nname = "{name}"\nrole = "producer"\nsha256 = "{sha256_hex(token)}"\n\n'
        for name, token in tokens.items()
    ))  # fmt: skip
    return tokens
