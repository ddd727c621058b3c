"""Single-use values: the context ``jti`` replay cache and control-API confirmation tokens.

Both are stored as SHA-256 digests or caller-computed hashes only, and both are consumed by one
atomic statement, so two replicas can never both accept the same value.
"""

from __future__ import annotations

from datetime import datetime

from sidecar.state import codec
from sidecar.state.codec import CODE_MAX, MXID_MAX, to_us
from sidecar.state.db import Database, Facet

#: Expired replay rows are deleted on every this-many-th call, keeping the hot path one statement.
_PURGE_EVERY = 256


class SingleUseOps(Facet):
    """Replay cache and confirmation tokens."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._jti_calls = 0

    async def remember_jti(self, jti: str, exp: datetime, now: datetime) -> bool:
        """Record a context id until ``exp``; False when it was already seen and has not expired."""
        if not isinstance(jti, str) or not jti:
            raise ValueError("jti must be a non-empty string")
        now_us = to_us(now)
        self._jti_calls += 1
        async with self._db.tx("single") as tx:
            if self._jti_calls % _PURGE_EVERY == 0:
                await tx.execute("DELETE FROM replay WHERE exp_us <= $1", now_us)
            # An expired row may be taken over; a live one makes the insert return nothing.
            row = await tx.fetchrow(
                "INSERT INTO replay AS r (jti_hash, exp_us) VALUES ($1, $2) ON CONFLICT (jti_hash)"
                " DO UPDATE SET exp_us = excluded.exp_us WHERE r.exp_us <= $3 RETURNING 1",
                codec.digest(jti),
                to_us(exp),
                now_us,
            )
        return row is not None

    async def put_confirmation(
        self, token_hash: str, scope_id: str, subject: str, action: str, expires_at: datetime
    ) -> None:
        """Store the hash of a confirmation token bound to one scope, subject and action."""
        codec.check_hex64(token_hash, "token_hash")
        codec.check_scope_id(scope_id)
        codec.check_bounded(subject, "subject", MXID_MAX)
        codec.check_code(action, "action")
        codec.check_bounded(action, "action", CODE_MAX)
        await self._execute(
            "single",
            "INSERT INTO confirmations (token_hash, scope_id, subject, action, expires_us) VALUES ($1, $2, $3, $4, $5)",
            token_hash,
            scope_id,
            subject,
            action,
            to_us(expires_at),
        )

    async def take_confirmation(self, token_hash: str, scope_id: str, subject: str, action: str, now: datetime) -> bool:
        """Consume a matching, unexpired token; True exactly once."""
        row = await self._fetchrow(
            "single",
            "DELETE FROM confirmations WHERE token_hash = $1 AND scope_id = $2 AND subject = $3 AND action = $4"
            " AND expires_us > $5 RETURNING 1",
            token_hash,
            scope_id,
            subject,
            action,
            to_us(now),
        )
        return row is not None
