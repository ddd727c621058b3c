"""Every client connection is bounded: how many one peer address and one listener hold, and how
long a request head may take.

- **Caps at accept.** Each listener (data, control, ops) counts its open connections, in all and
  by TCP peer address. A connection over either cap is answered with a fixed content-free error
  (``concurrency_limited``: 429 over the address's cap, 503 over the listener's) and closed
  before a byte of it is read. The address is the TCP peer's: a forwarded-for header is never
  read, because any client can write one, and a cap that waited for the header would already
  have spent the parsing it exists to save. Each listener has its own caps, so a flood of the
  data plane never takes the operations listener's capacity (probes, ``/metrics``).
- **A request head has a deadline and a size.** It must be complete ``listen.header_timeout_s``
  after the accept and after each response on a kept-alive connection, or the connection is
  closed. aiohttp's keep-alive timer is exactly that timer: armed at accept and after each
  response, it closes a connection that is still waiting for a complete head, and arriving bytes
  do not re-arm it; the deadline is its timeout. An unfinished head may also take at most
  ``listen.max_header_bytes`` (431, then close): aiohttp alone would hold about a megabyte of
  header lines per connection until the deadline. (A head pipelined behind a request that is
  still under way is left to aiohttp's own limits.)
- **File descriptors.** At start the soft ``RLIMIT_NOFILE`` is raised to the hard limit, and the
  caps are fitted under it (with room for upstream pools and the process's own files), so a
  flood meets a cap before the process runs out of descriptors.

Caps and counts are per process: with ``memgov serve --workers N`` each worker has its own
descriptors and its own caps (the kernel spreads one address's connections over the workers).
"""

from __future__ import annotations

import enum
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from aiohttp.web_protocol import RequestHandler

from sidecar import metrics
from sidecar.logs import error_type, get_logger
from sidecar.reasons import Reason, error_body, new_decision_id
from sidecar.settings import Settings

log = get_logger("connections")

Listener = Literal["data", "control", "ops"]
LISTENERS: Final[tuple[Listener, ...]] = ("data", "control", "ops")
#: Descriptors kept free beside the connection caps and the upstream and state pools: listening
#: sockets, the state file, OPA, tracing and erasure clients, and accepts that arrive together
#: before their refusals have closed them.
OWN_FILES: Final = 256


class Closed(enum.StrEnum):
    """Why a connection was refused or closed before a complete request (a metric label)."""

    PER_ADDRESS = "per_address"  # refused at accept: the peer address holds its cap
    TOTAL = "total"  # refused at accept: the listener holds its cap
    HEADER_TOO_LARGE = "header_too_large"  # an unfinished request head outgrew listen.max_header_bytes
    HEADER_TIMEOUT = "header_timeout"  # a request head had begun and was not complete in time
    IDLE = "idle"  # no byte of a request arrived in time


_ANSWERS: Final = {
    Closed.PER_ADDRESS: (b"HTTP/1.1 429 Too Many Requests", Reason.CONCURRENCY_LIMITED),
    Closed.TOTAL: (b"HTTP/1.1 503 Service Unavailable", Reason.CONCURRENCY_LIMITED),
    Closed.HEADER_TOO_LARGE: (b"HTTP/1.1 431 Request Header Fields Too Large", Reason.BAD_REQUEST),
}


def refusal(reason: Closed) -> bytes:
    """The whole answer to a refused connection or head: a status, the one error body, close."""
    status_line, code = _ANSWERS[reason]
    body = error_body(code, new_decision_id())
    head = b"%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    return head % (status_line, len(body)) + body


@dataclass(frozen=True, slots=True)
class Caps:
    """Open connections one listener holds at most, in all and per peer address."""

    total: int
    per_address: int


def peer_address(peername: object) -> str:
    """The address a connection counts under: the TCP peer's host, an IPv4-mapped IPv6 one as IPv4."""
    if isinstance(peername, tuple) and peername and isinstance(peername[0], str):
        host: str = peername[0]
        return host.removeprefix("::ffff:") if host.startswith("::ffff:") and "." in host else host
    return ""


class Gate:
    """The open connections of one listener, by peer address; admits or refuses each new one."""

    __slots__ = ("_by_address", "_closed", "_open", "_opened", "caps")

    def __init__(self, listener: Listener, caps: Caps) -> None:
        self.caps = caps
        self._by_address: dict[str, int] = {}
        self._open = 0
        self._opened = metrics.CONNECTIONS_OPEN.labels(listener)
        self._closed = {reason: metrics.CONNECTIONS_CLOSED.labels(listener, reason.value) for reason in Closed}

    @property
    def open(self) -> int:
        return self._open

    def admit(self, address: str) -> Closed | None:
        """Count a new connection from ``address``, or say which cap refuses it (and count that)."""
        held = self._by_address.get(address, 0)
        # The address's own cap first: a flooding address is told it is the one over its share.
        if held >= self.caps.per_address:
            refused = Closed.PER_ADDRESS
        elif self._open >= self.caps.total:
            refused = Closed.TOTAL
        else:
            self._by_address[address] = held + 1
            self._open += 1
            self._opened.inc()
            return None
        self._closed[refused].inc()
        return refused

    def release(self, address: str) -> None:
        """A connection ``admit`` counted has closed."""
        left = self._by_address[address] - 1
        if left:
            self._by_address[address] = left
        else:
            del self._by_address[address]
        self._open -= 1
        self._opened.dec()

    def timed_out(self, reason: Closed) -> None:
        self._closed[reason].inc()


class BoundedConnection(RequestHandler):
    """aiohttp's connection handler under a :class:`Gate`, with ``keepalive_timeout`` as the head deadline.

    Besides aiohttp's public hooks (``connection_made``, ``data_received``, ``log_access``, called
    once each response is written), it reads aiohttp 3.14's ``_request_count`` (heads parsed) and
    ``_messages`` (parsed, not yet handled), and wraps ``_process_keepalive`` (the timer's
    callback) only to tell a late head from an idle connection in the metric. mypy checks these
    names against the installed aiohttp; the tests check their behaviour.
    """

    __slots__ = ("_address", "_gate", "_head_bytes", "_in_request", "_max_head_bytes", "_unread_body")

    def __init__(self, manager: Any, *, gate: Gate, max_head_bytes: int, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._gate = gate
        self._address: str | None = None
        self._max_head_bytes = max_head_bytes
        # Bytes read since the last head was completed or answered, while no request was under way:
        # the unfinished head (counted, not timed: uvloop's clock moves once per loop iteration).
        self._head_bytes = 0
        self._in_request = False
        self._unread_body: Any = None  # an answered request's body still arriving (aiohttp reads and drops it)

    def connection_made(self, transport: Any) -> None:
        address = peer_address(transport.get_extra_info("peername"))
        refused = self._gate.admit(address)
        if refused is not None:
            # SECURITY: over a cap, nothing of the connection is read or parsed: a fixed answer, then close.
            self._force_close = True
            self._manager = None  # so aiohttp's connection_lost skips a connection its server never saw
            transport.write(refusal(refused))
            transport.close()
            return
        self._address = address
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._address is not None:
            self._gate.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        parsed, unread = self._request_count, self._unread_body
        super().data_received(data)
        if self._request_count != parsed:
            self._in_request, self._head_bytes = True, 0  # a head is complete: its request is under way
        elif unread is not None:
            if unread.is_eof():
                self._unread_body = None  # the next read begins a head
        elif not self._in_request:
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes and self.transport is not None:
                # SECURITY: an unfinished head does not grow until its deadline.
                self._gate.timed_out(Closed.HEADER_TOO_LARGE)
                self.transport.write(refusal(Closed.HEADER_TOO_LARGE))
                self.force_close()

    def log_access(self, request: Any, response: Any, time: float | None) -> None:
        self._in_request = bool(self._messages)  # a pipelined request may already be waiting
        if not request.content.is_eof():
            self._unread_body = request.content
        super().log_access(request, response, time)

    def _process_keepalive(self) -> None:
        open_before = self.transport is not None
        super()._process_keepalive()
        if open_before and self.transport is None:
            self._gate.timed_out(Closed.HEADER_TIMEOUT if self._head_bytes else Closed.IDLE)


def raise_fd_limit() -> int:
    """Raise the soft file-descriptor limit to the hard one (logged as numbers); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        log.info("process.fd_limit", fd_limit=soft)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # an unlimited hard limit, where the system refuses it as a soft one
        log.warning("process.fd_limit_unchanged", fd_limit=soft, error_type=error_type(exc))
        return soft
    log.info("process.fd_limit_raised", fd_limit=hard, fd_limit_before=soft)
    return hard


def fit(caps: Mapping[Listener, Caps], room: int) -> dict[Listener, Caps]:
    """The caps reduced, if they must be, so that the listeners' totals add up to at most ``room``.

    The operations listener keeps its cap (up to half the room); data and control share what is
    left in proportion to their caps. A cap is never raised, and none falls below one.
    """
    if sum(c.total for c in caps.values()) <= room:
        return dict(caps)
    ops = min(caps["ops"].total, max(1, room // 2))
    rest = max(room - ops, 0)
    shared = caps["data"].total + caps["control"].total
    totals = {"ops": ops} | {name: max(1, rest * caps[name].total // shared) for name in ("data", "control")}
    return {name: Caps(totals[name], min(caps[name].per_address, totals[name])) for name in LISTENERS}


def configured(settings: Settings) -> dict[Listener, Caps]:
    """Each listener's caps as configured (an address's cap is at most its listener's)."""
    listen = settings.listen
    totals = {name: getattr(listen.max_connections, name) for name in LISTENERS}
    return {
        name: Caps(totals[name], min(totals[name], getattr(listen.max_connections_per_address, name)))
        for name in LISTENERS
    }


def gates(settings: Settings) -> dict[Listener, Gate]:
    """One gate per listener, its caps fitted under this process's soft descriptor limit (as it is now)."""
    caps, upstream = configured(settings), settings.upstream
    pools = upstream.pool_size + upstream.memory_pool_size + settings.state.pool_size
    if upstream.embedding_url:
        pools += upstream.embedding_pool_size
    fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fd_limit == resource.RLIM_INFINITY:
        return {name: Gate(name, caps[name]) for name in LISTENERS}
    fitted = fit(caps, fd_limit - pools - OWN_FILES)
    for name in LISTENERS:
        if fitted[name] != caps[name]:
            log.warning("listener.capacity_reduced", listener=name, count=fitted[name].total, fd_limit=fd_limit)
    return {name: Gate(name, fitted[name]) for name in LISTENERS}
