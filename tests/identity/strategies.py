"""Hypothesis strategies and settings shared by the identity tests."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Modest example counts keep the identity suite fast on shared CPUs; no deadline, because speed
# is measured by the benchmarks and never asserted in a test.
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LOCALPART_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789._=-/+"
SENTINEL = "SENTINEL7f3a"

localparts = st.text(alphabet=LOCALPART_ALPHABET, min_size=1, max_size=40)
_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_top_label = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
dns_names = st.builds(lambda labels, top: ".".join([*labels, top]), st.lists(_label, max_size=3), _top_label)
ipv4_hosts = st.ip_addresses(v=4).map(str)
ipv6_hosts = st.ip_addresses(v=6).map(lambda a: f"[{a.compressed}]")
hosts = st.one_of(dns_names, ipv4_hosts, ipv6_hosts)
ports = st.none() | st.integers(min_value=1, max_value=65535)
server_names = st.builds(lambda h, p: h if p is None else f"{h}:{p}", hosts, ports)

#: Canonical (lower-case, minimal) MXIDs of at most 255 bytes.
mxids = st.builds(lambda lp, sn: f"@{lp}:{sn}", localparts, server_names).filter(lambda s: len(s) <= 255)

scope_ids = st.from_regex(r"s[0-9a-f]{24}", fullmatch=True)
generations = st.integers(min_value=0, max_value=2**53)
