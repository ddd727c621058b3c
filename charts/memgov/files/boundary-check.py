"""memgov's `helm test`: kagent's controller must refuse a direct connection and answer through memgov.

Run in a pod that carries an agent's labels, it tries each --direct URL (the connection must fail:
refused or timed out, once the name resolves), each --via-memgov URL (it must answer 2xx) and each
--memgov-answers URL: a path memgov refuses itself (a spelling of a memory route it never relays),
which must come back with memgov's own error body, so the check proves memgov is what answered
there and not kagent behind it (in sidecar mode kagent's Service name lands on memgov).
One line per check; exit 0 when all hold, 1 when one does not, 2 when a check could not be made.
Standard library only: it runs on memgov's own image.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

PASS, FAIL, UNSURE = 0, 1, 2


def _resolves(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        socket.getaddrinfo(parts.hostname or "", parts.port or 80, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return True


def _fetch(url: str, timeout: float) -> tuple[int, bytes] | None:
    """The HTTP status and (at most 4 KiB of) the body the URL answers with, or None without a connection."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read(4096)
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(4096)
    except (urllib.error.URLError, OSError):
        return None


def _get(url: str, timeout: float) -> int | None:
    """The HTTP status the URL answers with, or None when no connection could be made."""
    answer = _fetch(url, timeout)
    return None if answer is None else answer[0]


def check_direct(url: str, timeout: float) -> tuple[int, str]:
    """A direct connection to the controller must not get an answer."""
    if not _resolves(url):
        return UNSURE, f"UNSURE direct {url}: the name does not resolve, so nothing was proven"
    status = _get(url, timeout)
    if status is not None:
        return FAIL, f"FAIL direct {url}: the controller answered HTTP {status}; memgov can be bypassed"
    return PASS, f"PASS direct {url}: no connection, as required (only memgov may reach the controller)"


def check_via_memgov(url: str, timeout: float) -> tuple[int, str]:
    """A call through memgov must be answered."""
    status = _get(url, timeout)
    if status is None:
        return FAIL, f"FAIL via memgov {url}: no connection; memgov is down or this pod is not let in"
    if not 200 <= status < 300:
        return FAIL, f"FAIL via memgov {url}: HTTP {status}; memgov or the controller behind it is not healthy"
    return PASS, f"PASS via memgov {url}: HTTP {status}"


def check_memgov_answers(url: str, timeout: float) -> tuple[int, str]:
    """memgov, not kagent, must answer: its content-free refusal body names route_denied and a decision id."""
    answer = _fetch(url, timeout)
    if answer is None:
        return FAIL, f"FAIL memgov answers {url}: no connection; memgov is down or this pod is not let in"
    status, body = answer
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if not (isinstance(parsed, dict) and parsed.get("error") == "route_denied" and parsed.get("decision_id")):
        return FAIL, f"FAIL memgov answers {url}: HTTP {status} without memgov's refusal; something else answered"
    return PASS, f"PASS memgov answers {url}: HTTP {status}, memgov's own refusal"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--direct", action="append", default=[], help="a controller URL that must not answer")
    parser.add_argument("--via-memgov", action="append", default=[], help="a URL through memgov that must answer")
    parser.add_argument(
        "--memgov-answers", action="append", default=[], help="a URL memgov itself must refuse (route_denied)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per attempt")
    args = parser.parse_args(argv)
    if not args.direct and not args.via_memgov and not args.memgov_answers:
        print("UNSURE nothing to check: give --direct, --via-memgov and/or --memgov-answers URLs")
        return UNSURE
    outcomes = []
    checks = (
        (check_direct, args.direct),
        (check_via_memgov, args.via_memgov),
        (check_memgov_answers, args.memgov_answers),
    )
    for check, urls in checks:
        for url in urls:
            outcome, line = check(url, args.timeout)
            print(line, flush=True)
            outcomes.append(outcome)
    return FAIL if FAIL in outcomes else max(outcomes)


if __name__ == "__main__":
    sys.exit(main())
