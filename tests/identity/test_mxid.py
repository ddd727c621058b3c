"""Matrix identifier grammar, server-name comparison and typed principals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.identity import IdentityError
from sidecar.identity.mxid import (
    CheckedPrincipal,
    Origin,
    check_principal,
    normalise_server_name,
    parse_mxid,
    parse_room_id,
    same_server,
)
from sidecar.reasons import Reason
from tests.identity.strategies import (
    PROPERTY,
    SENTINEL,
    dns_names,
    hosts,
    localparts,
    mxids,
    server_names,
)

# Characters that never belong in a localpart: upper case, historical punctuation, whitespace,
# controls, invisible and look-alike characters (Cyrillic а/е/о, full-width ＠).
_NON_ASCII = st.characters(min_codepoint=0x80)
_NOT_LOCALPART = st.sampled_from(list("ABZ !\"#$%&'*,;<>?@[\\]^`{|}~\t\n\r\x00\x7f\u200b\u00a0аео＠")) | _NON_ASCII
# The same for server names, minus upper case (hosts are case-insensitive), brackets and ":".
_NOT_SERVER = st.sampled_from(list(" !\"#$%&'*,;<>?@\\^`{|}~_+=/\t\n\r\x00\x7f\u200b\u00a0аео＠")) | _NON_ASCII


def _insert(draw: st.DrawFn, text: str, chars: st.SearchStrategy[str]) -> str:
    i = draw(st.integers(min_value=0, max_value=len(text)))
    return text[:i] + draw(chars) + text[i:]


@st.composite
def invalid_mxids(draw: st.DrawFn) -> str:
    """Strings that look more or less like MXIDs but must be refused."""
    lp, sn, dns = draw(localparts), draw(server_names), draw(dns_names)
    forms = {
        "bad localpart char": lambda: f"@{_insert(draw, lp, _NOT_LOCALPART)}:{sn}",
        "bad server char": lambda: f"@{lp}:{_insert(draw, sn, _NOT_SERVER)}",
        "missing sigil": lambda: f"{lp}:{sn}",
        "wrong sigil": lambda: f"{draw(st.sampled_from('!#+$%'))}{lp}:{sn}",
        "bare localpart": lambda: draw(st.sampled_from(["", "@"])) + lp,
        "email": lambda: f"{lp}@{dns}",
        "display name": lambda: draw(st.from_regex(r"[A-Z][a-z]{1,9} [A-Z][a-z]{1,9}", fullmatch=True)),
        "empty localpart": lambda: f"@:{sn}",
        "empty server": lambda: f"@{lp}:",
        "trailing dot": lambda: f"@{lp}:{dns}.",
        "leading dot": lambda: f"@{lp}:.{dns}",
        "empty label": lambda: f"@{lp}:{dns.replace('.', '..', 1) if '.' in dns else dns + '..org'}",
        "port zero or too big": lambda: f"@{lp}:{dns}:{draw(st.sampled_from([0, 65536, 99999]))}",
        "port leading zero": lambda: f"@{lp}:{dns}:0{draw(st.integers(1, 9999))}",
        "ipv6 without brackets": lambda: f"@{lp}:{draw(st.ip_addresses(v=6)).compressed}",
        "too long": lambda: f"@{lp}{'a' * 255}:{sn}",
        "sentinel upper case": lambda: f"@{SENTINEL}:{sn}",
    }
    return forms[draw(st.sampled_from(sorted(forms)))]()


class TestParseMxid:
    @PROPERTY
    @given(mxids)
    def test_canonical_mxids_round_trip(self, mxid: str) -> None:
        """A canonical MXID parses and prints back exactly."""
        assert str(parse_mxid(mxid)) == mxid

    @PROPERTY
    @given(localparts, dns_names, st.data())
    def test_host_case_does_not_change_identity(self, lp: str, dns: str, data: st.DataObject) -> None:
        """A DNS host name in any letter case names the same user, printed in lower case."""
        flags = data.draw(st.lists(st.booleans(), min_size=len(dns), max_size=len(dns)))
        shouted = "".join(c.upper() if up else c for c, up in zip(dns, flags, strict=True))
        assert parse_mxid(f"@{lp}:{shouted}") == parse_mxid(f"@{lp}:{dns}")
        assert str(parse_mxid(f"@{lp}:{shouted}")) == f"@{lp}:{dns}"

    @PROPERTY
    @given(invalid_mxids())
    def test_invalid_strings_are_refused(self, value: str) -> None:
        """Everything that is not a complete, canonical MXID is principal_invalid."""
        with pytest.raises(IdentityError) as exc:
            parse_mxid(value)
        assert exc.value.reason is Reason.PRINCIPAL_INVALID

    @pytest.mark.parametrize(
        ("value", "localpart", "server_name", "host", "port"),
        [
            ("@alice:example.org", "alice", "example.org", "example.org", None),
            ("@alice:Example.ORG:8448", "alice", "example.org:8448", "example.org", 8448),
            ("@a.b_c=d-e/f+g:hs.example", "a.b_c=d-e/f+g", "hs.example", "hs.example", None),
            ("@bot:1.2.3.4:1", "bot", "1.2.3.4:1", "1.2.3.4", 1),
            ("@bot:[2001:DB8::1]:65535", "bot", "[2001:db8::1]:65535", "[2001:db8::1]", 65535),
            ("@x:localhost", "x", "localhost", "localhost", None),
        ],
    )
    def test_parts_are_exposed(self, value: str, localpart: str, server_name: str, host: str, port: int | None) -> None:
        """Localpart, server name, host and port come out canonical."""
        m = parse_mxid(value)
        assert (m.localpart, m.server_name, m.host, m.port) == (localpart, server_name, host, port)

    @pytest.mark.parametrize(
        "value",
        [
            "@Alice:example.org",  # upper-case localparts are historical only
            "@аlice:example.org",  # Cyrillic а
            "@alice:exаmple.org",  # Cyrillic а in the host
            "@alice:example.org.",  # trailing-dot twin of example.org
            "@alice:-example.org",
            "@alice:example-.org",
            "@alice:example.123",  # a numeric last label reads as an IPv4 address
            "@alice:999.1.1.1",
            "@alice:01.2.3.4",  # leading zeros are octal to some parsers
            "@alice:0x7f.1",
            "@alice:[0:0:0:0:0:0:0:1]",  # IPv6 not in canonical form
            "@alice:[::1%eth0]",
            "@alice:[1.2.3.4]",
            "@alice:example.org:08448",
            "@alice:example.org:",
            "@alice:example.org:-1",
            " @alice:example.org",
            "@alice:example.org\n",
            "@alice:example.org:8448:1",
            "@" + "a" * 200 + ":" + "b" * 60 + ".org",  # longer than 255 bytes
            "@alice:" + "a" * 64 + ".org",  # a DNS label is at most 63 characters
            "alice@example.org",
            "Alice Smith",
            "alice",
            "@alice",
            "＠alice:example.org",
        ],
    )
    def test_known_look_alikes_are_refused(self, value: str) -> None:
        """Look-alikes and second spellings of real MXIDs are principal_invalid."""
        with pytest.raises(IdentityError) as exc:
            parse_mxid(value)
        assert exc.value.reason is Reason.PRINCIPAL_INVALID

    @pytest.mark.parametrize("value", [None, 42, b"@alice:example.org"])
    def test_non_strings_are_refused(self, value: object) -> None:
        """Values that are not strings (for example from JSON) are principal_invalid."""
        with pytest.raises(IdentityError):
            parse_mxid(value)  # type: ignore[arg-type]  # a non-string on purpose


class TestServerNames:
    @pytest.mark.parametrize(
        ("mxid", "server", "same"),
        [
            ("@a:example.org", "EXAMPLE.org", True),
            ("@a:Example.org", "example.org", True),
            ("@a:example.org", "example.org:8448", False),
            ("@a:example.org:8448", "example.org:8448", True),
            ("@a:example.org", "example.org.", False),
            ("@a:example.org", "evil.example.org", False),
            ("@a:example.org", "not a server", False),
        ],
    )
    def test_same_server(self, mxid: str, server: str, same: bool) -> None:
        """Hosts compare case-insensitively; the port and every other character must agree."""
        assert same_server(parse_mxid(mxid), server) is same

    @PROPERTY
    @given(server_names)
    def test_normalised_names_are_stable(self, name: str) -> None:
        """Normalising a canonical server name changes nothing."""
        assert normalise_server_name(name) == name

    @PROPERTY
    @given(hosts)
    def test_hosts_in_any_case_normalise_to_lower_case(self, host: str) -> None:
        """A host without a port is a complete server name, normalised to lower case."""
        assert normalise_server_name(host.upper()) == host


class TestRoomId:
    @pytest.mark.parametrize(
        "value",
        ["!abcDEF123:example.org", "!abc:Example.ORG:8448", "!" + "A" * 21 + "-_" + "z" * 20, "!x:[::1]"],
    )
    def test_valid_room_ids_are_kept_verbatim(self, value: str) -> None:
        """Legacy and room-version-12 room IDs are accepted and never rewritten."""
        assert parse_room_id(value) == value

    @pytest.mark.parametrize(
        "value",
        [
            "abc:example.org",
            "!:example.org",
            "!abc:",
            "!abc",
            "!" + "A" * 42,
            "!ab c:example.org",
            "#alias:example.org",
            "!abc:example.org.",
            "!" + "A" * 43 + ":example.org:0",
        ],
    )
    def test_malformed_room_ids_are_refused(self, value: str) -> None:
        """Anything but a room ID is principal_invalid."""
        with pytest.raises(IdentityError) as exc:
            parse_room_id(value)
        assert exc.value.reason is Reason.PRINCIPAL_INVALID


class TestCheckPrincipal:
    @pytest.mark.parametrize(
        ("mxid", "origin", "ok"),
        [
            ("@alice:example.org", "native", True),
            ("@alice:EXAMPLE.ORG", "native", True),
            ("@alice:other.org", "native", False),
            ("@alice:example.org:8448", "native", False),
            ("@_bridge_alice:example.org", "appservice", True),
            ("@_bridge_alice:other.org", "appservice", False),
            ("@alice:other.org", "remote", True),
            ("@alice:example.org", "remote", False),
            ("@client:example.org", "oauth", True),
            ("@actor:fedi.example", "fediverse", True),
            ("@alice:example.org", "admin", False),
            ("@alice:example.org", "NATIVE", False),
        ],
    )
    def test_origin_must_fit_where_the_mxid_lives(self, mxid: str, origin: str, ok: bool) -> None:
        """Native and appservice users are local, remote users are not; unknown origins fail."""
        if ok:
            assert check_principal(mxid, origin, "example.org").origin == Origin(origin)
        else:
            with pytest.raises(IdentityError) as exc:
                check_principal(mxid, origin, "example.org")
            assert exc.value.reason is Reason.PRINCIPAL_INVALID

    def test_appservice_principal_is_not_the_native_one(self) -> None:
        """The same MXID as appservice and as native are two different principals."""
        native = check_principal("@alice:example.org", "native", "example.org")
        appservice = check_principal("@alice:example.org", "appservice", "example.org")
        assert native != appservice
        assert native == CheckedPrincipal(parse_mxid("@alice:example.org"), Origin.NATIVE)
        assert len({native, appservice}) == 2
