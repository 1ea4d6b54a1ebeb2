"""Id scopes: whose namespace a client-chosen message id lives in
(docs/decisions/0012-tenant-scoped-client-ids.md, docs/security.md "Client ids").

A token limited to topic prefixes is a tenant, and its client-chosen ids are its own: the
id `order-1` that a token of `orders.` sends is stored as `orders./order-1`, the same id
of a token of `billing.` as `billing./order-1`. Neither can reach, learn of or block the
other's. The scope is the token's prefixes, sorted and without those another one covers,
joined by `,` (`billing.,invoices.`); when that is longer than `MAX_SCOPE_LEN` or holds
a character outside `_PLAIN`, `~` and 16 hex digits of its SHA-256 stand for it. So
tokens of the same prefixes (a tenant's producer and consumer) share a scope. A token
file's `id_scope` pins it instead (timerwheel.security.tokens): tokens of one tenant with
different prefixes then share it, and it stays when the prefixes change. A token still
reaches only the ids of its scope held on its own topics.

`/` is in neither the client-id nor the topic alphabet, so no client can spell another
tenant's stored id in a send, and the split of a stored id is unambiguous. Tokens without
prefixes (admin, or a producer of every topic) and servers without tokens have no scope:
their ids are stored and shown as sent, as before scopes existed.

How a scoped token sees stored ids (`view`), a bijection whose inverse is `stored`:

| stored                                   | its view  |
|------------------------------------------|-----------|
| `<own scope>/X` (X not of the server's form) | `X`   |
| a server-made id `H` (or `H#n`)          | `H`       |
| any other unscoped id `X`                | `/X`      |
| anything else (`<scope>/X`)              | as stored |

This module is pure: the translation of calls is `timerwheel.server.id_scopes`.
"""

from __future__ import annotations

import hashlib
import re
from contextvars import ContextVar
from functools import lru_cache

SEPARATOR = "/"
MAX_SCOPE_LEN = 64
_PLAIN = re.compile(r"[A-Za-z0-9_.%|,-]{1,64}")
# A scope as a stored id may hold it: plain, or `~` and a hash.
SCOPE_RE = re.compile(r"[A-Za-z0-9_.%|,~-]{1,64}")
# The server's own ids (engine/ids.py, and the cluster's `.p<n>` suffix): never scoped.
_SERVER_ID = re.compile(r"[0-9A-F]{32}(?:\.p[0-9]{1,4})?")

_SCOPE: ContextVar[tuple[str, tuple[str, ...]]] = ContextVar("id_scope", default=("", ()))


@lru_cache(maxsize=256)
def scope_of(prefixes: tuple[str, ...]) -> str:
    """The id scope of a token's topic prefixes; "" for none (every topic)."""
    if not prefixes:
        return ""
    kept = sorted(set(prefixes))
    kept = [p for p in kept if not any(p != q and p.startswith(q) for q in kept)]
    text = ",".join(kept)
    if _PLAIN.fullmatch(text):
        return text
    return "~" + hashlib.sha256(text.encode()).hexdigest()[:16]


def set_call_scope(prefixes: tuple[str, ...], pinned: str = "") -> None:
    """The call running on this thread is made with a token of these topic prefixes and
    this `id_scope` ("": derived from the prefixes), set by the request guard for every
    authenticated call."""
    _SCOPE.set((pinned or scope_of(prefixes), prefixes))


def call_scope() -> tuple[str, tuple[str, ...]]:
    """(scope, prefixes) of the call running on this thread; ("", ()) when unscoped."""
    return _SCOPE.get()


def is_server_form(message_id: str) -> bool:
    """A server-made id (or an occurrence of a series that has one)."""
    return _SERVER_ID.fullmatch(message_id.split("#", 1)[0]) is not None


def split(stored_id: str) -> tuple[str, str]:
    """(scope, id) of a stored id; ("", id) when it has no scope."""
    scope, separator, rest = stored_id.partition(SEPARATOR)
    return (scope, rest) if separator else ("", stored_id)


def view(scope: str, stored_id: str) -> str:
    """How a token of `scope` is shown `stored_id` (the table above)."""
    owner, rest = split(stored_id)
    if owner == scope and owner and not is_server_form(rest):
        return rest
    if not owner and SEPARATOR not in stored_id and not is_server_form(stored_id):
        return SEPARATOR + stored_id
    return stored_id


def stored(scope: str, client_id: str) -> str:
    """The inverse of `view`: the stored id a token of `scope` names by `client_id`."""
    if client_id.startswith(SEPARATOR):
        return client_id[1:]
    if SEPARATOR in client_id or is_server_form(client_id):
        return client_id
    return f"{scope}{SEPARATOR}{client_id}"


def own(scope: str, client_id: str) -> str:
    """`client_id` in `scope`: where a new client id of that scope is stored."""
    return f"{scope}{SEPARATOR}{client_id}"


def unscoped_text(scope: str, text: str) -> str:
    """An error text with the scope's ids as its token knows them (`'orders./x'` ->
    `'x'`)."""
    return text.replace(f"'{scope}{SEPARATOR}", "'") if scope else text
