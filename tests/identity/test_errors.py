"""IdentityError: the reason code is the whole message, whatever the rejected input was."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sidecar.identity import IdentityError
from sidecar.identity.appname import parse_agent_ref
from sidecar.identity.keys import SessionKeys
from sidecar.identity.mxid import check_principal, parse_mxid, parse_room_id
from sidecar.identity.tokens import verify_context, verify_subject_token
from sidecar.reasons import Reason
from tests.identity.strategies import SENTINEL
from tests.support.identity import NOW, Signer

KEYS = SessionKeys(b"0123456789abcdef0123456789abcdef")


class TestIdentityError:
    @pytest.mark.parametrize(
        ("call", "reason"),
        [
            (lambda s: parse_mxid(f"@{s}:example.org"), Reason.PRINCIPAL_INVALID),
            (lambda s: parse_mxid(f"@alice:{s}.org "), Reason.PRINCIPAL_INVALID),
            (lambda s: parse_mxid(f"{s}@example.org"), Reason.PRINCIPAL_INVALID),
            (lambda s: parse_room_id(f"!{s} :example.org"), Reason.PRINCIPAL_INVALID),
            (lambda s: check_principal(f"@{s.lower()}:example.org", s, "example.org"), Reason.PRINCIPAL_INVALID),
            (lambda s: KEYS.verify(f"mg1.s0123456789abcdef01234567.1.{s}"), Reason.KEY_INVALID),
            (lambda s: parse_agent_ref(f"kagent/{s}"), Reason.BAD_REQUEST),
        ],
    )
    def test_message_is_only_the_reason_code(self, call: Callable[[str], object], reason: Reason) -> None:
        """A rejected input never appears in the error's str, repr or args."""
        with pytest.raises(IdentityError) as exc:
            call(SENTINEL)
        err = exc.value
        assert err.reason is reason
        assert str(err) == reason.value and err.args == (reason.value,)
        assert SENTINEL not in repr(err)

    @pytest.mark.parametrize("which", ["context", "subject"])
    def test_token_errors_do_not_keep_the_token(self, hs256: Signer, which: str) -> None:
        """A refused token is not reachable from the error or its exception chain."""
        token = hs256.sign({"sub": "@alice:example.org", "exp": NOW + 60, "jti": SENTINEL, "x": SENTINEL})
        with pytest.raises(IdentityError) as exc:
            if which == "context":
                verify_context(token, hs256.verifier, now=NOW)
            else:
                verify_subject_token(token + SENTINEL, hs256.verifier, now=NOW)
        err = exc.value
        assert SENTINEL not in repr(err) and err.__cause__ is None and err.__suppress_context__
