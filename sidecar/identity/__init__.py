"""Identity primitives: Matrix identifiers, session and storage keys, signed tokens, agent names.

Everything here is pure (no network, no state store; only key files are read) and fails with
one exception type::

    IdentityError(reason)            the only error raised for a rejected input
      .reason: Reason                principal_invalid, key_invalid, context_invalid,
                                     context_expired, auth_required, bad_request

The message of an ``IdentityError`` is its reason code and nothing else, so an error can be
logged or turned into an error body without ever echoing the offending input.
"""

from __future__ import annotations

from sidecar.reasons import Reason


class IdentityError(Exception):
    """An identity input was rejected; ``reason`` says why, the input itself is never kept."""

    __slots__ = ("reason",)

    def __init__(self, reason: Reason) -> None:
        self.reason = Reason(reason)
        super().__init__(self.reason.value)

    def __str__(self) -> str:
        return self.reason.value

    def __repr__(self) -> str:
        return f"IdentityError({self.reason.value!r})"


__all__ = ["IdentityError"]
