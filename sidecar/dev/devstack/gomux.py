"""Route matching with gorilla/mux semantics, as kagent's controller router behaves.

Paths are cleaned first (``//``, ``.`` and ``..`` answer 301 to the cleaned path); routes are tried
in registration order; a route whose path matches but whose methods do not only leads to 405 if
no later route matches fully; no match at all is 404. Trailing slashes are significant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
_VAR = re.compile(r"\{([A-Za-z_]+)\}")


def clean_path(path: str) -> str:
    """Go's path.Clean plus gorilla's rule of keeping a trailing slash."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    parts: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if parts:
                parts.pop()
            continue
        parts.append(seg)
    cleaned = "/" + "/".join(parts)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


@dataclass(frozen=True)
class Route(Generic[T]):
    """One registered route; ``methods`` empty means any method."""

    template: str
    target: T
    methods: frozenset[str] = frozenset()
    prefix: bool = False
    regex: re.Pattern[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        body = _VAR.sub(
            lambda m: f"(?P<{m.group(1)}>[^/]+)", re.escape(self.template).replace(r"\{", "{").replace(r"\}", "}")
        )
        object.__setattr__(self, "regex", re.compile("^" + body + ("" if self.prefix else "$")))


@dataclass(frozen=True)
class Match(Generic[T]):
    """Outcome of resolving a request: a route, 301 (with location), 404 or 405."""

    status: int
    route: Route[T] | None = None
    params: dict[str, str] = field(default_factory=dict)
    location: str | None = None


class Mux(Generic[T]):
    """An ordered route table."""

    def __init__(self) -> None:
        self._routes: list[Route[T]] = []

    def add(self, template: str, target: T, methods: Iterable[str] = (), *, prefix: bool = False) -> None:
        """Register a route (``{var}`` matches one path segment)."""
        self._routes.append(Route(template, target, frozenset(methods), prefix))

    def resolve(self, method: str, path: str, raw_query: str = "") -> Match[T]:
        """Find the route for a request the way gorilla/mux would."""
        cleaned = clean_path(path)
        if cleaned != path:
            return Match(301, location=cleaned + (f"?{raw_query}" if raw_query else ""))
        wrong_method = False
        for route in self._routes:
            found = route.regex.match(path)
            if found is None:
                continue
            if route.methods and method not in route.methods:
                wrong_method = True
                continue
            return Match(200, route, found.groupdict())
        return Match(405 if wrong_method else 404)
