"""Matrix identifiers: user IDs (MXIDs), server names, room IDs, and typed principals (SPEC R-2).

The grammar follows the Matrix appendix on identifiers, narrowed where a wider reading would let
two spellings name one identity or let a look-alike pass:

* localparts use only today's allowed set ``a-z 0-9 . _ = - / +``; upper case and the historical
  characters are refused, so ``@Alice:hs`` can never pose as ``@alice:hs``;
* DNS host names are lower-cased (DNS is case-insensitive) and must be real host names: no empty
  labels, so no trailing-dot ``example.org.`` twin; labels of 1-63 characters not starting or
  ending with ``-``; a numeric last label means an IPv4 literal, which must be a canonical quad;
* IPv6 literals sit in brackets and must be in their canonical compressed form; ports are
  ``1-65535`` without leading zeros.

Everything is ASCII; any other character (Cyrillic ``а``, full-width ``＠``, controls,
whitespace) fails the grammar.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass
from typing import Final

from sidecar.identity import IdentityError
from sidecar.reasons import Reason

MAX_ID_BYTES: Final = 255

_MXID = re.compile(r"@([a-z0-9._=\-/+]+):(.+)", re.ASCII)
_SERVER = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[0-9A-Za-z.\-]+)(?::([1-9][0-9]{0,4}))?", re.ASCII)
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?", re.ASCII)
# URL parsers read a host whose last label is a number (or 0x…) as an IPv4 address.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*", re.ASCII)
_ROOM_V12 = re.compile(r"![A-Za-z0-9_\-]{43}", re.ASCII)
_ROOM_LEGACY = re.compile(r"![0-9A-Za-z._~=+/\-]+:(.+)", re.ASCII)


def _invalid() -> IdentityError:
    return IdentityError(Reason.PRINCIPAL_INVALID)


def _canonical_host(raw: str) -> str:
    """Return the lower-cased host if it is a canonical IPv4, IPv6 (bracketed) or DNS name."""
    host = raw.lower()
    if host.startswith("["):
        inner = host[1:-1]
        try:
            ok = ipaddress.IPv6Address(inner).compressed == inner
        except ValueError:
            ok = False
    elif _NUMERIC_LABEL.fullmatch(host.rpartition(".")[2]):
        try:
            ok = str(ipaddress.IPv4Address(host)) == host
        except ValueError:
            ok = False
    else:
        ok = len(host) <= MAX_ID_BYTES and all(_LABEL.fullmatch(label) for label in host.split("."))
    if not ok:
        raise _invalid()
    return host


def _split_server(value: str) -> tuple[str, int | None]:
    m = _SERVER.fullmatch(value)
    if m is None:
        raise _invalid()
    port = None if m.group(2) is None else int(m.group(2))
    if port is not None and port > 65535:
        raise _invalid()
    return _canonical_host(m.group(1)), port


def normalise_server_name(value: str) -> str:
    """Return the canonical form of a Matrix server name; raise IdentityError(principal_invalid)."""
    if not isinstance(value, str) or len(value) > MAX_ID_BYTES or not value.isascii():
        raise _invalid()
    host, port = _split_server(value)
    return host if port is None else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class Mxid:
    """A parsed Matrix user ID; build it with :func:`parse_mxid`. ``host`` keeps IPv6 brackets."""

    localpart: str
    server_name: str
    host: str
    port: int | None

    def __str__(self) -> str:
        return f"@{self.localpart}:{self.server_name}"


def parse_mxid(value: object) -> Mxid:
    """Parse a complete MXID ``@localpart:server_name``; raise IdentityError(principal_invalid)."""
    # SECURITY: the length and ASCII checks run first so no hostile input reaches the regexes
    # at full size, and nothing outside ASCII (homoglyphs, invisible characters) can match.
    if not isinstance(value, str) or len(value) > MAX_ID_BYTES or not value.isascii():
        raise _invalid()
    m = _MXID.fullmatch(value)
    if m is None:
        raise _invalid()
    host, port = _split_server(m.group(2))
    server_name = host if port is None else f"{host}:{port}"
    return Mxid(localpart=m.group(1), server_name=server_name, host=host, port=port)


def same_server(mxid: Mxid, server_name: str) -> bool:
    """Return whether the MXID belongs to ``server_name`` (case-insensitive host, exact port)."""
    try:
        return mxid.server_name == normalise_server_name(server_name)
    except IdentityError:
        return False


def parse_room_id(value: str) -> str:
    """Validate a room ID (``!opaque:server`` or the v12 ``!<43-char hash>``); return it unchanged.

    Room IDs are opaque and compared exactly, so unlike MXIDs they are not normalised.
    """
    if not isinstance(value, str) or len(value) > MAX_ID_BYTES or not value.isascii():
        raise _invalid()
    if _ROOM_V12.fullmatch(value):
        return value
    m = _ROOM_LEGACY.fullmatch(value)
    if m is None:
        raise _invalid()
    _split_server(m.group(1))
    return value


class Origin(enum.StrEnum):
    """Where a principal's identity comes from (ADR: the origin kind is part of the principal)."""

    NATIVE = "native"
    APPSERVICE = "appservice"
    REMOTE = "remote"
    OAUTH = "oauth"
    FEDIVERSE = "fediverse"


@dataclass(frozen=True, slots=True)
class CheckedPrincipal:
    """A complete MXID with an origin that fits where it lives (``check_principal``); equality includes the origin."""

    mxid: Mxid
    origin: Origin


# Origins whose MXIDs must live on (True) or off (False) the local homeserver. OAuth clients and
# Fediverse actors can be mapped either way; the federation policy decides about them.
_MUST_BE_LOCAL: Final[dict[Origin, bool]] = {Origin.NATIVE: True, Origin.APPSERVICE: True, Origin.REMOTE: False}


def check_principal(mxid_str: str, origin: str, local_server: str) -> CheckedPrincipal:
    """Build a principal, refusing an origin that contradicts where the MXID lives."""
    parsed = parse_mxid(mxid_str)
    try:
        kind = Origin(origin)
    except ValueError:
        raise _invalid() from None
    expected = _MUST_BE_LOCAL.get(kind)
    # SECURITY: a remote or appservice identity cannot claim the native kind, and vice versa.
    if expected is not None and (parsed.server_name == normalise_server_name(local_server)) != expected:
        raise _invalid()
    return CheckedPrincipal(mxid=parsed, origin=kind)
