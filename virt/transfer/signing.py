"""HMAC-SHA256 signatures of a request: ``method``, ``path`` and an expiry, with the
cloud's shared secret (``[transfer] secret``).

A signed URL carries ``?expires=<unix seconds>&signature=<hex>``; a request is accepted
only with a signature of its own method and path that has not expired. The path is signed
as sent (not decoded), so a URL cannot be re-pointed, and its query is not signed beyond
those two parameters, which the signature covers. The secret never leaves ``TransferKey``:
its ``repr`` does not show it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Final

EXPIRES: Final = "expires"
SIGNATURE: Final = "signature"


@dataclass(frozen=True, slots=True)
class TransferKey:
    """The shared secret (``secret``, never shown) and how long a URL it signs stays
    valid (``ttl_s``)."""

    secret: bytes = field(repr=False)
    ttl_s: int = 300

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("a transfer key needs a non-empty secret")
        if self.ttl_s <= 0:
            raise ValueError("a signed URL's ttl must be positive")

    @classmethod
    def from_text(cls, secret: str, ttl_s: int = 300) -> TransferKey:
        return cls(secret.encode("utf-8"), ttl_s)


def signature(key: TransferKey, method: str, path: str, expires: int) -> str:
    message = f"{method.upper()}\n{path}\n{expires}".encode()
    return hmac.new(key.secret, message, hashlib.sha256).hexdigest()


def signed_url(key: TransferKey, base_url: str, path: str, now: float | None = None) -> str:
    """``base_url`` + ``path`` with a GET signature valid for ``key.ttl_s`` seconds."""
    expires = int(now if now is not None else time.time()) + key.ttl_s
    query = urllib.parse.urlencode(
        {EXPIRES: expires, SIGNATURE: signature(key, "GET", path, expires)}
    )
    return f"{base_url.rstrip('/')}{path}?{query}"


def is_valid(
    key: TransferKey, method: str, path: str, query: str, now: float | None = None
) -> bool:
    """Whether ``query`` holds an unexpired signature of ``method`` ``path``."""
    params = urllib.parse.parse_qs(query, strict_parsing=False)
    expires_values, signatures = params.get(EXPIRES, []), params.get(SIGNATURE, [])
    if len(expires_values) != 1 or len(signatures) != 1 or not expires_values[0].isdigit():
        return False
    expires = int(expires_values[0])
    if expires < (now if now is not None else time.time()):
        return False
    expected = signature(key, method, path, expires)
    return hmac.compare_digest(expected, signatures[0])
