"""Secret files: the one reader of key, password and token files, and its error.

A secret is read from a file named by a setting or an option, never from the environment or the
command line. The error names that setting and never the file's content, so it can be printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: Values that are never a secret, whatever their length (compared after stripping, in lower case).
PLACEHOLDER_SECRETS: Final = frozenset({b"changeme", b"change-me", b"secret", b"placeholder", b"dev", b"test"})


class SecretError(Exception):
    """A secret file cannot be used; the message names the setting or option, never the secret."""


def read_secret(path: Path, key: str, *, min_bytes: int = 16) -> bytes:
    """Read a secret file; refuse missing, short or placeholder secrets, naming only the key."""
    try:
        data = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SecretError(f"{key}: cannot read the file ({exc.strerror})") from None
    if data.lower() in PLACEHOLDER_SECRETS or len(data) < min_bytes:
        raise SecretError(f"{key}: the secret is a placeholder or shorter than {min_bytes} bytes")
    return data
