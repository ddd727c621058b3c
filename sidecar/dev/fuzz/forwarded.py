"""What the upstreams of a fuzzed data-plane request received, judged against what memgov checked.

What reaches kagent and the provider must be what memgov checked: canonical JSON, one agent name,
the scope's storage key, finite non-zero vectors, limits held, no context header; a passthrough
body arrives byte for byte; an invocation carries the session key, or goes to the memory-free variant.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.dev.devstack.gojson import go_query
from sidecar.dev.devstack.kagent import controller_mux
from sidecar.dev.fuzz.cases import Case
from sidecar.dev.fuzz.chaos import Seen
from sidecar.dev.fuzz.oracle import UPSTREAM_REASONS, decision_of, is_good_vector, reason_body, strict_json, utf8_len
from sidecar.dev.fuzz.stack import AGENT, FuzzStack, canonical_app
from sidecar.dev.fuzz.wire import Reply

REFUSED = frozenset({"lookalike", "fragment", "absolute", "odd", "ungoverned", "list", "delete_all"})
RELAYED = frozenset({"passthrough", "a2a_other", "card"})
SAVE_FIELDS = frozenset({"agent_name", "user_id", "content", "vector", "ttl_days", "metadata"})
SEARCH_FIELDS = frozenset({"agent_name", "user_id", "vector", "limit", "min_score"})
EMBED_FIELDS = frozenset({"input", "model", "dimensions", "encoding_format", "user"})
_MUX = controller_mux()


class Forwarded:
    """The upstream requests one case caused; ``fail`` records a violated contract."""

    def __init__(self, case: Case, stack: FuzzStack, env: Mapping[str, Any], fail: Callable[[str, str], None]) -> None:
        self.case, self.stack, self.env, self.fail = case, stack, env, fail

    def check(self, seen: list[Seen], reply: Reply | None) -> None:
        family = self.case.route
        for s in seen:
            if s.header("X-Memgov-Context") is not None:
                self.fail("context_forwarded", f"to {s.upstream}")
        if family in REFUSED and seen:
            self.fail("refused_target_forwarded", f"{len(seen)} upstream request(s)")
        for s in seen:
            if s.upstream == "embedding":
                self.check_embedding(s)
            elif self.is_memory_route(s):
                self.check_memory(s)
        if family in RELAYED | {"invoke"}:
            self.check_relay(seen, reply)

    @staticmethod
    def is_memory_route(s: Seen) -> bool:
        found = _MUX.resolve(s.method, s.path, s.raw_path.partition("?")[2])
        return found.route is not None and found.route.target.kind == "memory"

    def check_embedding(self, s: Seen) -> None:
        if s.body is None:
            self.fail("forwarded_undecodable", "embedding")
            return
        value, problem = strict_json(s.body, EMBED_FIELDS)
        if problem:
            self.fail("forwarded_noncanonical", f"embedding {problem}")
            return
        for name in ("X-User-Id", "X-Agent-Name"):
            if s.header(name) is not None:
                self.fail("forwarded_kagent_header", f"embedding {name}")
        inputs = value.get("input") if isinstance(value, dict) else None
        items = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
        limits = self.stack.limits
        if len(items) > limits.max_batch_facts:
            self.fail("forwarded_over_limit", f"embedding {len(items)} items")
        if any(not isinstance(i, str) or utf8_len(i) > limits.embedding_item_bytes for i in items):
            self.fail("forwarded_over_limit", "embedding item size")

    def check_memory(self, s: Seen) -> None:
        path = s.raw_path
        if (s.method, path) not in (("POST", "/api/memories/sessions"), ("POST", "/api/memories/search")):
            self.fail("memory_route_bypass", f"{s.method} reached kagent's {s.path.rsplit('/', 1)[-1]} handler")
            return
        if s.body is None:
            self.fail("forwarded_undecodable", "memory")
            return
        save = path.endswith("/sessions")
        value, problem = strict_json(s.body, SAVE_FIELDS if save else SEARCH_FIELDS)
        if problem or not isinstance(value, dict):
            self.fail("forwarded_noncanonical", f"memory {problem or 'not an object'}")
            return
        self.check_identity(s, value)
        limits = self.stack.limits
        if not is_good_vector(value.get("vector")):
            self.fail("forwarded_bad_vector", "save" if save else "search")
        if save:
            content = value.get("content", "")
            if not isinstance(content, str) or utf8_len(content) > limits.max_fact_bytes:
                self.fail("forwarded_over_limit", "fact size")
            ttl = value.get("ttl_days")
            if not (isinstance(ttl, int) and not isinstance(ttl, bool) and 1 <= ttl <= limits.max_days):
                self.fail("forwarded_over_limit", "ttl_days")
        else:
            limit = value.get("limit")
            if not (isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit <= limits.search_max_limit):
                self.fail("forwarded_over_limit", "search limit")

    def check_identity(self, s: Seen, value: dict[str, Any]) -> None:
        user = value.get("user_id")
        if not isinstance(user, str) or not user.startswith("mgs1.") or s.header("X-User-Id") != user:
            self.fail("forwarded_identity", "user_id is not the storage key in body and header")
            return
        scope = self.stack.scopes.get(user.split(".")[1])
        if scope is None:
            self.fail("forwarded_identity", "storage key of no known scope")
            return
        if value.get("agent_name") != canonical_app(scope.agent):
            self.fail("forwarded_agent_name", "not the scope's one app_name")
        if any(user == "mgs1." + ".".join(k.split(".")[1:3]) for k in scope.keys):
            self.fail("storage_key_guessable", "derivable from the session key")

    def check_relay(self, seen: list[Seen], reply: Reply | None) -> None:
        kagent = [s for s in seen if s.upstream == "kagent"]
        if self.case.route == "invoke":
            self.check_invoke(kagent, reply)
            return
        if len(kagent) != 1:
            return
        s, request = kagent[0], self.case.request
        sent_target = request.wire(self.env)[0].decode("utf-8", "surrogateescape")
        if s.raw_path != sent_target:
            self.fail("forwarded_path_differs", "passthrough target changed on the way")
        if request.body is None:
            return
        plain = request.plain_body(self.env)
        encoders: dict[str, Callable[[bytes], bytes]] = {
            "gzip": lambda b: gzip.compress(b, mtime=0),
            "deflate": zlib.compress,
        }
        encode = encoders.get(request.encoding)
        raw = encode(plain) if encode is not None else plain
        label = next((v for k, v in request.headers if k.lower() == "content-encoding"), None)
        expected = _decoded(raw, label if isinstance(label, str) else None)
        if s.body != expected:
            self.fail("passthrough_body_altered", f"content-encoding {label or 'none'}")
        if label is not None and s.header("Content-Encoding") != label:
            self.fail("passthrough_body_altered", "content-encoding header changed")

    def check_invoke(self, kagent: list[Seen], reply: Reply | None) -> None:
        decision = decision_of(reply) if reply is not None else None
        if decision is None or not kagent:
            return
        s = kagent[-1]
        query_user = go_query(s.raw_path.partition("?")[2]).get("user_id")
        variant = s.path.split("/")[4].endswith("-nomem")
        err = reason_body(reply) if reply is not None else None
        if err is not None and err["error"] in UPSTREAM_REASONS:
            # The upstream did not answer what memgov sent: the header names that failure (deny), not the
            # policy's decision, so what was sent is judged by where it went.
            action = "deny" if variant else "forward"
        else:
            action = decision.action
        if action == "forward":
            key = self.env["KEY"]
            if s.header("X-User-Id") != key or any(value != key for value in query_user or ()):
                self.fail("invoke_identity_not_rewritten", "a carrier does not hold the session key")
            if f"/{AGENT.split('/')[1]}" not in s.path:
                self.fail("invoke_target_changed", "forwarded to another agent")
        elif not variant:
            self.fail("rewrite_target", f"{action} not sent to the memory-disabled variant")


def _decoded(raw: bytes, label: str | None) -> bytes | None:
    """What a server that honours Content-Encoding reads from ``raw`` (None: it cannot decode it)."""
    try:
        if label == "gzip":
            return gzip.decompress(raw)
        if label == "deflate":
            return zlib.decompress(raw)
    except (OSError, zlib.error, EOFError):
        return None
    return raw
