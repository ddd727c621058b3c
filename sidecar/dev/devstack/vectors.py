"""Deterministic text embeddings for the stand-in provider: a signed, hashed bag of words.

Texts sharing content words land close together (a question about a saved fact scores well above
0.3 against it) while unrelated texts are near-orthogonal. No model, no randomness.
"""

from __future__ import annotations

import hashlib
import math
import re

_WORD = re.compile(r"[a-z0-9]+")
# Function words would make every pair of sentences look alike.
_STOP = frozenset(
    (
        "a all also an and any are as at be been but by can could did do does for from had has have how i if "
        "in into is it its me my no not of on or our so than that the their them then there these they this "
        "to was we were what when where which who why will with would you your please tell about some just "
        "very"
    ).split()
)


def tokens(text: str) -> list[str]:
    """Lower-cased content words, with a plain plural ``s`` removed."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP or len(word) < 2:
            continue
        out.append(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return out


def embed_text(text: str, dim: int = 768) -> list[float]:
    """A unit vector of ``dim`` floats for ``text``; equal texts give equal vectors."""
    vector = [0.0] * dim
    # A text without content words still gets its own direction.
    for token in tokens(text) or ["\x00" + text.strip().lower()]:
        digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
        vector[digest % dim] += 1.0 if (digest >> 40) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:  # two tokens that cancel exactly in one slot
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]
