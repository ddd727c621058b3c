"""Hot reload of the policy pack: read, vet, declare, prepare and commit, or keep the live pack.

A :class:`PackLoader` owns the live pack of one :class:`~sidecar.policy.runtime.PolicyRuntime`:
it loads it at start, again whenever the folder's fingerprint changes (a watcher task) or on
SIGHUP, and swaps it in only once the engine committed it. On any failure the previous pack
keeps serving and /readyz names the step, file and line that refused the new one.
"""

from __future__ import annotations

import asyncio
import re
import signal
from dataclasses import dataclass
from typing import Any

from sidecar.logs import get_logger
from sidecar.policy import metrics
from sidecar.policy.engine import Engine, EngineUnavailable
from sidecar.policy.pack import Pack, PackError, fingerprint, read_pack
from sidecar.policy.vet import vet
from sidecar.reasons import declare
from sidecar.settings import PolicySettings

log = get_logger("policy")


@dataclass(frozen=True)
class ReloadOutcome:
    """The last reload attempt, as /readyz shows it: outcome, the revision tried, for a refusal step and file."""

    outcome: str
    revision: str | None = None
    step: str | None = None
    file: str | None = None
    #: For a refusal: the line of ``file`` at fault when the message names one, and the message itself
    #: (about pack files only, never request data; /readyz is on the operations port).
    line: int | None = None
    message: str | None = None


#: The longest refusal message /readyz repeats.
_MESSAGE_MAX = 400


def refusal(outcome: str, revision: str | None, exc: PackError) -> ReloadOutcome:
    """A refused pack as /readyz shows it: the step, the file, and the first line of the message naming it."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    named = [ln for ln in lines if exc.file and exc.file in ln]
    message = (named or lines or [""])[0][:_MESSAGE_MAX]
    found = re.search(re.escape(exc.file) + r":(\d+)", message) if exc.file else None
    return ReloadOutcome(outcome, revision, exc.step, exc.file, int(found.group(1)) if found else None, message)


class PackLoader:
    """The live pack of one runtime and everything that replaces it."""

    def __init__(self, settings: PolicySettings, engine: Engine) -> None:
        self.settings, self.engine = settings, engine
        #: The live pack and the engine's prepared form of it (None until one loaded).
        self.pack: Pack | None = None
        self.prepared: Any = None
        self.last_reload: ReloadOutcome | None = None
        self._seen: str | None = None
        self._lock = asyncio.Lock()
        self._waiters: list[asyncio.Future[bool]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sighup: asyncio.AbstractEventLoop | None = None

    def watch(self) -> None:
        """Check the folder every ``reload_interval_s`` and reload when it changed."""
        self._spawn(self._watch())

    async def reload(self) -> bool:
        """Read, validate and swap in the pack on disk; keep the live one on any failure."""
        async with self._lock:
            ok = await self._reload()
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(ok)
        return ok

    async def _reload(self) -> bool:
        try:
            attempted: str | None = None
            self._seen = fingerprint(self.settings.dir)
            attempted = self._seen
            pack = read_pack(self.settings.dir)
            live = self.pack is not None and pack.revision == self.pack.revision
            if live and not self.engine.stale:
                metrics.RELOADS.labels("unchanged").inc()
                # A refused edit undone: the files on disk are the live pack again.
                self.last_reload = ReloadOutcome("loaded", pack.revision)
                return True
            if not live:
                await asyncio.to_thread(vet, pack)
                self._declare(pack)
            # An engine that fell out of step (OPA serving another revision) is checked again.
            prepared = self.prepared if live else self.engine.prepare(pack)
            await self.engine.commit(prepared)
        except (PackError, EngineUnavailable) as exc:
            outcome = "rejected" if isinstance(exc, PackError) else "engine_unavailable"
            step, file = (exc.step, exc.file) if isinstance(exc, PackError) else ("engine", None)
            metrics.RELOADS.labels(outcome).inc()
            self.last_reload = (
                refusal(outcome, attempted, exc)
                if isinstance(exc, PackError)
                else ReloadOutcome(outcome, attempted, step, file)
            )
            log.error(
                "policy.reload_failed",
                outcome=outcome,
                step=step,
                pack_file=file,
                engine=self.engine.name,
                revision=self.pack.revision if self.pack else None,
            )
            if self.engine.stale and self.prepared is not None:
                await self._recommit_live()
            return False
        self.pack, self.prepared = pack, prepared
        self.last_reload = ReloadOutcome("loaded", pack.revision)
        metrics.RELOADS.labels("loaded").inc()
        metrics.show_pack(self.engine.name, pack.revision)
        log.info("policy.loaded", engine=self.engine.name, revision=pack.revision)
        return True

    @staticmethod
    def _declare(pack: Pack) -> None:
        # Before the commit: a decision the new pack makes must find its declared codes accepted.
        try:
            declare((d.code, d.after) for d in pack.reasons)
        except ValueError as exc:
            raise PackError(f"data/reasons.yaml: {exc}", file="data/reasons.yaml", step="data") from None

    async def _recommit_live(self) -> None:
        try:
            await self.engine.commit(self.prepared)
        except (PackError, EngineUnavailable):
            return

    def next_reload(self) -> asyncio.Future[bool]:
        """A future, registered now, that resolves when the next reload attempt ends (True: loaded)."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_interval_s)
            try:
                current = fingerprint(self.settings.dir)
            except PackError:
                current = None
            # An OPA serving another revision marks the engine stale; check again until it matches.
            if current != self._seen or self.pack is None or self.engine.stale:
                await self.reload()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def install_sighup(self) -> None:
        """Reload on SIGHUP (call once from the running server; ``close`` removes the handler)."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload()))
        self._sighup = loop

    async def close(self) -> None:
        """Stop the watcher and remove the SIGHUP handler."""
        if self._sighup is not None:
            self._sighup.remove_signal_handler(signal.SIGHUP)
            self._sighup = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
