"""Bearer tokens and their roles, read from the operator's TOML file.

    [[tokens]]
    name = "orders-producer"      # shown in logs and errors, never the token
    role = "producer"             # producer | consumer | admin
    sha256 = "<hex sha256 of the token>"   # or: token = "<plain token>" (warned about)
    topics = ["orders."]          # optional: topic prefixes this token may use
    id_scope = "orders"           # optional, with topics: its client ids' scope (else
                                  # its prefixes; timerwheel.security.scopes)

Only the SHA-256 of each token is kept in memory. A presented token is hashed and
compared with every entry's hash by `hmac.compare_digest`, all entries every time, so
neither the comparison nor the number of comparisons depends on how much of a hash
matched. Tokens should be long random strings (e.g. `openssl rand -hex 32`): a hash of
a guessable token protects nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from dataclasses import dataclass
from enum import Enum

from timerwheel.wheels.settings import SettingsError

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_KNOWN_KEYS = {"name", "role", "sha256", "token", "topics", "id_scope"}
_ID_SCOPE = re.compile(r"[A-Za-z0-9_.%|,-]{1,64}")  # no '~': a derived scope's hash form


class Role(Enum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """Who a call is from: the token's name, role and allowed topic prefixes."""

    name: str
    role: Role
    topics: tuple[str, ...] = ()  # empty: every topic
    id_scope: str = ""  # its client ids' scope when pinned; "": derived from `topics`

    def may_use(self, topic: str) -> bool:
        return not self.topics or topic.startswith(self.topics)

    def describe(self) -> str:
        return f"token {self.name!r} (role {self.role.value})"


@dataclass(frozen=True)
class TokenTable:
    entries: tuple[tuple[bytes, Principal], ...]  # (sha256 digest, principal)
    plain_names: tuple[str, ...] = ()  # entries given as plain tokens (warned at start)

    def authenticate(self, token: str) -> Principal | None:
        """The principal whose hash matches `token`, compared in constant time."""
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for known, principal in self.entries:
            if hmac.compare_digest(known, digest):  # no early exit: every entry compared
                found = principal
        return found


def sha256_hex(token: str) -> str:
    """What goes into the file's `sha256 = ...` for `token`."""
    return hashlib.sha256(token.encode()).hexdigest()


def load_tokens(path: str) -> TokenTable:
    """Parse and check the token file; SettingsError names the file, entry and value."""
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise SettingsError(f"auth_tokens_file={path!r}: cannot read it: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"auth_tokens_file={path!r}: not valid TOML: {exc}") from exc
    unknown = set(document) - {"tokens"}
    entries = document.get("tokens")
    if unknown or not isinstance(entries, list) or not entries:
        raise SettingsError(
            f"auth_tokens_file={path!r}: expected one or more [[tokens]] tables"
            + (f", found keys {sorted(unknown)}" if unknown else "")
        )
    parsed = [_entry(path, index, entry) for index, entry in enumerate(entries)]
    names = [principal.name for _, principal, _ in parsed]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SettingsError(f"auth_tokens_file={path!r}: token names used twice: {duplicates}")
    digests = [digest for digest, _, _ in parsed]
    if len(set(digests)) != len(digests):
        raise SettingsError(f"auth_tokens_file={path!r}: two entries have the same token")
    return TokenTable(
        entries=tuple((digest, principal) for digest, principal, _ in parsed),
        plain_names=tuple(principal.name for _, principal, plain in parsed if plain),
    )


def _entry(path: str, index: int, entry: object) -> tuple[bytes, Principal, bool]:
    where = f"auth_tokens_file={path!r}: tokens[{index}]"
    if not isinstance(entry, dict):
        raise SettingsError(f"{where}: expected a table, got {entry!r}")
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise SettingsError(f"{where}: unknown keys {unknown}; known: {sorted(_KNOWN_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise SettingsError(f"{where}.name={name!r}: must be a non-empty string")
    where = f"auth_tokens_file={path!r}: token {name!r}"
    role_text = entry.get("role")
    try:
        role = Role(role_text)
    except ValueError:
        roles = ", ".join(r.value for r in Role)
        raise SettingsError(f"{where}: role={role_text!r}: must be one of {roles}") from None
    topics = entry.get("topics", [])
    if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
        raise SettingsError(f"{where}: topics={topics!r}: must be a list of non-empty prefixes")
    if topics and role is Role.ADMIN:
        raise SettingsError(
            f"{where}: topics={topics!r}: an admin token cannot be limited to topics "
            "(Export and Stats see every topic); give it role producer or consumer"
        )
    id_scope = entry.get("id_scope", "")
    if id_scope != "" and (not isinstance(id_scope, str) or not _ID_SCOPE.fullmatch(id_scope)):
        raise SettingsError(
            f"{where}: id_scope={id_scope!r}: must be 1 to 64 of letters, digits and _ . % | , -"
        )
    if id_scope and not topics:
        raise SettingsError(
            f"{where}: id_scope={id_scope!r}: applies to a token with topics (one without "
            "them names every id as stored)"
        )
    principal = Principal(name, role, tuple(topics), id_scope)
    return _digest(where, entry), principal, "token" in entry


def _digest(where: str, entry: dict) -> bytes:
    if ("sha256" in entry) == ("token" in entry):
        raise SettingsError(f'{where}: give exactly one of sha256 = "<hex>" or token = "..."')
    if "token" in entry:
        token = entry["token"]
        if not isinstance(token, str) or not token:
            raise SettingsError(f"{where}: token must be a non-empty string")  # not echoed
        return hashlib.sha256(token.encode()).digest()
    hex_digest = entry["sha256"]
    if not isinstance(hex_digest, str) or not _HEX64.fullmatch(hex_digest):
        raise SettingsError(f"{where}: sha256={hex_digest!r}: must be 64 hex digits")
    return bytes.fromhex(hex_digest)
