"""Sentinels: unique markers planted in memory text, and the forms a leak of one can take.

A leaked sentinel is searched for in plain, JSON-escaped, URL-encoded (both flavours) and base64
(standard and URL-safe, at every byte alignment) form, so an encoded leak is caught as surely as
a verbatim one. ``memgov drill`` and the test suite share this logic.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterable, Iterator
from urllib.parse import quote, quote_plus


def make_sentinel(tag: str) -> str:
    """A unique marker with a non-ASCII letter and a quote, so escaping changes its form."""
    return f'SNTL{tag}{secrets.token_hex(6)}ü"x'


def _b64_forms(raw: bytes) -> Iterator[str]:
    # The sentinel can start at any offset of an encoded blob; drop the edge characters that
    # depend on neighbouring bytes and keep the stable core of each alignment.
    for pad in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            text = enc(b"\0" * pad + raw).decode()
            core = text[4 if pad else 0 :]
            core = core[: len(core) - 4]
            if len(core) >= 8:
                yield core


def encoded_forms(sentinel: str) -> list[str]:
    """Every form in which a leaked sentinel is searched for."""
    core = sentinel.partition("ü")[0]  # the ASCII part is found even if the rest is mangled
    raw = sentinel.encode()
    forms = {
        sentinel,
        core,
        json.dumps(sentinel)[1:-1],
        json.dumps(sentinel, ensure_ascii=False)[1:-1],
        quote(sentinel, safe=""),
        quote_plus(sentinel),
        *_b64_forms(raw),
        *_b64_forms(core.encode()),
    }
    return sorted(forms)


def find_leaks(sentinel: str, haystacks: Iterable[str | bytes]) -> list[str]:
    """Return the encoded forms of ``sentinel`` found in any haystack (empty when clean)."""
    texts = [h.decode("utf-8", "replace") if isinstance(h, bytes) else h for h in haystacks]
    return [form for form in encoded_forms(sentinel) if any(form in t for t in texts)]
