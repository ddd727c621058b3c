"""``memgov policy test``: run the case tables on each engine, report coverage and disagreements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sidecar.policy.cases import Case, Result, coverage, load_cases, run_engine
from sidecar.policy.cedar import CedarEngine
from sidecar.policy.engine import Engine, EngineUnavailable
from sidecar.policy.opa import OpaEngine
from sidecar.policy.pack import PackError, read_pack


@dataclass
class SuiteReport:
    """Every engine's results on every case."""

    cases: list[Case]
    results: dict[str, list[Result]]

    def failures(self) -> list[Result]:
        """Results that differ from the case's expectation."""
        return [r for rs in self.results.values() for r in rs if not r.ok]

    def disagreements(self) -> list[tuple[Case, list[Result]]]:
        """Cases on which the engines answered differently."""
        out = []
        for i, case in enumerate(self.cases):
            answers = [rs[i] for rs in self.results.values()]
            if len({(r.action, r.reasons) for r in answers}) > 1:
                out.append((case, answers))
        return out

    def uncovered(self) -> list[str]:
        """Rules without an ALLOW or a DENY case."""
        return [c.rule for c in coverage(self.cases) if not c.complete]

    @property
    def ok(self) -> bool:
        """True when every engine passed every case, they agree, and every rule is covered."""
        return not (self.failures() or self.disagreements() or self.uncovered())


async def run_suite(
    pack_dir: Path, cases_dir: Path, engines: list[str], opa_url: str | None, timeout_s: float
) -> SuiteReport:
    """Load the pack into each engine and run every case on it."""
    pack = read_pack(pack_dir)
    cases = load_cases(cases_dir, pack.limits, pack.federation)
    results: dict[str, list[Result]] = {}
    for name in engines:
        engine: Engine = CedarEngine() if name == "cedar" else OpaEngine(opa_url or "", timeout_s)
        try:
            await engine.commit(engine.prepare(pack))
            results[name] = await run_engine(engine, cases)
        except EngineUnavailable as exc:
            raise PackError(f"{name}: engine unavailable ({exc.kind})") from None
        finally:
            await engine.close()
    return SuiteReport(cases, results)


def render(report: SuiteReport) -> str:
    """Per-rule coverage table with pass counts per engine, then failures and disagreements."""
    engines = list(report.results)
    head = f"{'rule':<26}{'allow':>6}{'deny':>6}{'bypass':>7}" + "".join(f"{e:>10}" for e in engines)
    lines = [head, "-" * len(head)]
    for cov in coverage(report.cases):
        row = f"{cov.rule:<26}{cov.counts['allow']:>6}{cov.counts['deny']:>6}{cov.counts['bypass']:>7}"
        for e in engines:
            mine = [r for r in report.results[e] if r.case.rule == cov.rule]
            row += f"{sum(r.ok for r in mine):>5}/{len(mine):<4}"
        lines.append(row + ("" if cov.complete else "  <- needs ALLOW and DENY cases"))
    total = len(report.cases)
    lines.append("-" * len(head))
    lines.append(f"{'total':<45}" + "".join(f"{sum(r.ok for r in report.results[e]):>5}/{total:<4}" for e in engines))
    for r in report.failures():
        want = f"{r.case.action.value} {list(r.case.reasons)}"
        lines.append(f"FAIL [{r.engine}] {r.case.id}: got {r.action} {list(r.reasons)}, want {want}")
    for case, answers in report.disagreements():
        said = "; ".join(f"{r.engine}: {r.action} {list(r.reasons)}" for r in answers)
        lines.append(f"DISAGREE {case.id}: {said}")
    verdict = "ok" if report.ok else "FAILED"
    lines.append(f"{verdict}: {total} cases, {len(engines)} engine(s), {len(report.disagreements())} disagreement(s)")
    return "\n".join(lines)
