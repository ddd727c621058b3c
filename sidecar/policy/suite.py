"""``memgov policy test``: case tables on each engine, coverage per code and per rule, a differential run.

Every selected case runs on each engine (Cedar in-process; Rego with ``opa eval``, or on an OPA
server with ``--opa-url``). Coverage counts, per Cedar policy and per Rego ``deny`` rule, the
cases it decided; on a full run (the whole folder, no selection) a rule no case fires fails the
run, as does a code without ALLOW and DENY rows. With both engines, mutated variants of every
base input are decided by both, and any disagreement is reported with the mutated field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.policy.cases import Case, CaseError, Result, coverage, judge, load_bases, load_cases
from sidecar.policy.cedar import CedarEngine
from sidecar.policy.conditions import Uncovered, cedar_uncovered, rego_uncovered, rego_unevaluated
from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import DecisionInput
from sidecar.policy.mutate import Mutant, data_mutants, data_strings, mutants, vocabulary
from sidecar.policy.opa import OpaEngine
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack, PackError, read_pack
from sidecar.policy.rego_eval import RegoEval
from sidecar.policy.rules import Site, rule_codes
from sidecar.policy.vet import vet
from sidecar.reasons import Action, declare


def load(pack_dir: Path) -> Pack:
    """Read and vet a pack for the tools, and accept its declared codes in this process."""
    pack = read_pack(pack_dir)
    vet(pack, compile_rego=False)
    try:
        declare((d.code, d.after) for d in pack.reasons)
    except ValueError as exc:
        raise PackError(f"data/reasons.yaml: {exc}", file="data/reasons.yaml", step="data") from None
    return pack


def select(cases: list[Case], patterns: list[str]) -> list[Case]:
    """Cases whose name equals a pattern or whose ``file::name`` id contains one (case-insensitive)."""
    if not patterns:
        return cases
    wanted = [p.lower() for p in patterns]
    return [c for c in cases if any(w == c.name.lower() or w in c.id.lower() for w in wanted)]


class Engines:
    """One pack loaded into the tool engines; answers many inputs at once and says which rules decided."""

    def __init__(self, pack: Pack, opa_url: str | None = None, timeout_s: float = 5.0) -> None:
        self.pack = pack
        self._opa_url, self._timeout = opa_url, timeout_s
        self._cedar = CedarEngine()
        self._cedar_ready = False
        self._rego: RegoEval | None = None
        #: The Rego lines OPA evaluated in the last ``evaluate`` with rules, as (file, line).
        self.covered_lines: set[tuple[str, int]] = set()

    async def cedar(self) -> CedarEngine:
        """The Cedar engine with this pack committed."""
        if not self._cedar_ready:
            await self._cedar.commit(self._cedar.prepare(self.pack))
            self._cedar_ready = True
        return self._cedar

    def rego(self) -> RegoEval:
        """The offline Rego evaluator of this pack (created on first use)."""
        if self._rego is None:
            self._rego = RegoEval(self.pack)
        return self._rego

    async def evaluate(
        self, engine: str, inputs: list[DecisionInput], *, rules: bool = True
    ) -> tuple[list[Verdict | None], dict[Site, int]]:
        """Verdicts (None: no usable answer) and, per rule, how many inputs it decided (Rego: 1 = fired).

        Without ``rules`` the Rego half skips OPA's coverage report (about half its evaluation time)
        and reports no rules."""
        fired: dict[Site, int] = {}
        if engine == "cedar":
            cedar = await self.cedar()
            verdicts: list[Verdict | None] = []
            for explained in cedar.explain_many_sync(inputs):
                verdict, sites = explained if explained is not None else (None, [])
                verdicts.append(verdict)
                for site in sites:
                    fired[site] = fired.get(site, 0) + 1
            return verdicts, fired
        if rules:
            verdicts, hits, self.covered_lines = self.rego().covered([i.model_dump(mode="json") for i in inputs])
            fired = dict.fromkeys(hits, 1)
        if self._opa_url:
            return await self._server(inputs), fired
        if not rules:
            verdicts = self.rego().verdicts([i.model_dump(mode="json") for i in inputs])
        return verdicts, fired

    async def _server(self, inputs: list[DecisionInput]) -> list[Verdict | None]:
        server = OpaEngine(self._opa_url or "", self._timeout)
        try:
            await server.commit(server.prepare(self.pack))
            out: list[Verdict | None] = []
            for inp in inputs:
                try:
                    out.append(await server.evaluate(inp))
                except EngineUnavailable:
                    out.append(None)
            return out
        finally:
            await server.close()

    def sites(self, engine: str) -> list[Site]:
        """Every rule of one language, in file order."""
        if engine == "cedar":
            return list(self._cedar.prepare(self.pack).sites.values())
        return self.rego().sites

    async def close(self) -> None:
        """Release the evaluators."""
        await self._cedar.close()
        if self._rego is not None:
            self._rego.close()


@dataclass
class SuiteReport:
    """Every engine's results on every selected case, rule coverage and the differential run."""

    pack: Pack
    cases: list[Case]
    bases: dict[str, dict[str, Any]]
    full: bool
    results: dict[str, list[Result]]
    rules: dict[str, dict[Site, int]]
    mutants: int = 0
    differences: list[tuple[Mutant, dict[str, Result]]] = field(default_factory=list)
    #: Conditions no selected case made do their job, and Rego lines OPA never evaluated (reported only).
    conditions: list[Uncovered] = field(default_factory=list)
    unevaluated: list[str] = field(default_factory=list)
    #: Why condition coverage is missing for a language, when it could not be computed.
    conditions_note: str = ""

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
        """Codes without an ALLOW or a DENY case."""
        return [c.rule for c in coverage(self.cases, rule_codes(self.pack)) if not c.complete]

    def unfired(self) -> list[Site]:
        """Rules no selected case made fire, in either language."""
        return [site for fired in self.rules.values() for site, n in fired.items() if n == 0]

    def problems(self, *, with_cases: bool = True) -> list[str]:
        """Why the run failed, one phrase each (failing cases and case disagreements with ``with_cases``)."""
        out = []
        if with_cases and self.failures():
            out.append(f"{len(self.failures())} failing case result(s)")
        if with_cases and self.disagreements():
            out.append(f"engines disagree on {len(self.disagreements())} case(s)")
        if self.differences:
            out.append(f"engines disagree on {len(self.differences)} mutated input(s)")
        if self.full and self.uncovered():
            out.append(f"{len(self.uncovered())} code(s) without ALLOW and DENY cases")
        if self.full and self.unfired():
            out.append(f"{len(self.unfired())} rule(s) no case fires")
        return out

    @property
    def ok(self) -> bool:
        """Every case passed and the engines agree; on a full run every code and every rule is covered."""
        coverage_ok = not (self.uncovered() or self.unfired()) or not self.full
        return not (self.failures() or self.disagreements() or self.differences) and coverage_ok


async def run_suite(
    pack_dir: Path,
    cases_path: Path,
    engines: list[str],
    opa_url: str | None,
    timeout_s: float,
    patterns: list[str] | None = None,
) -> SuiteReport:
    """Load the pack into each engine and run the selected cases, then the differential run."""
    pack = load(pack_dir)
    everything = load_cases(cases_path, pack)
    unmatched = [p for p in patterns or [] if not select(everything, [p])]
    if unmatched:
        # A typo would otherwise run nothing and pass.
        raise CaseError(f"-k {', '.join(map(repr, unmatched))} matches no case in {cases_path}")
    cases = select(everything, patterns or [])
    folder = cases_path if cases_path.is_dir() else cases_path.parent
    bases = load_bases(folder, pack)
    tools = Engines(pack, opa_url, timeout_s)
    report = SuiteReport(pack, cases, bases, cases_path.is_dir() and not patterns, {}, {})
    try:
        for name in engines:
            verdicts, fired = await tools.evaluate(name, [c.inp for c in cases])
            report.results[name] = [judge(c, name, v) for c, v in zip(cases, verdicts, strict=True)]
            report.rules[name] = {site: fired.get(site, 0) for site in tools.sites(name)}
        _conditions(report, tools, engines)
        if len(engines) > 1:
            await _differential(report, tools, engines, everything)
    finally:
        await tools.close()
    return report


def _conditions(report: SuiteReport, tools: Engines, engines: list[str]) -> None:
    """Coverage per condition of the selected cases, in each language run."""
    inputs = [c.inp for c in report.cases]
    if "cedar" in engines:
        report.conditions += cedar_uncovered(report.pack, inputs)
    if "opa" in engines:
        try:
            report.conditions += rego_uncovered(report.pack, tools.rego(), inputs)
        except PackError as exc:
            report.conditions_note = f"Rego conditions not evaluated: {exc}"
        report.unevaluated = rego_unevaluated(report.pack, tools.covered_lines)


def differential_inputs(bases: dict[str, dict[str, Any]], cases: list[Case], pack: Pack) -> list[Mutant]:
    """The differential run's inputs: one-field variants of every base, every base under changed
    data, and every row of a non-native principal under changed data (the partner records that
    admit it are data, and no base has such a principal)."""
    variants = mutants(bases, vocabulary([c.changes for c in cases]), data_strings(pack.org))
    for name, doc in bases.items():
        variants += data_mutants(name, doc)
    for case in cases:
        if case.inp.principal is not None and case.inp.principal.origin != "native":
            variants += data_mutants(case.id, case.inp.model_dump(mode="json"))
    return list({m.label: m for m in variants}.values())


async def _differential(report: SuiteReport, tools: Engines, engines: list[str], cases: list[Case]) -> None:
    variants = differential_inputs(report.bases, cases, report.pack)
    report.mutants = len(variants)
    # Probes carry no expectation: only the engines' answers are compared.
    probes = [Case("mutant", m.label, "", "", m.inp, Action.FORWARD, ()) for m in variants]
    answers = {}
    for name in engines:
        verdicts, _ = await tools.evaluate(name, [m.inp for m in variants], rules=False)
        answers[name] = [judge(p, name, v) for p, v in zip(probes, verdicts, strict=True)]
    for i, variant in enumerate(variants):
        said = {name: answers[name][i] for name in engines}
        if len({(r.action, r.reasons) for r in said.values()}) > 1:
            report.differences.append((variant, said))


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values (lists are leaves)."""
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for key, value in doc.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: doc}


def input_diff(base: dict[str, Any], inp: DecisionInput) -> list[str]:
    """The input as changes from its base: ``- path: old`` / ``+ path: new`` lines."""
    before, after = flatten(base), flatten(inp.model_dump(mode="json"))
    lines = []
    for path in sorted(set(before) | set(after)):
        if before.get(path, ...) != after.get(path, ...):
            if path in before:
                lines.append(f"- {path}: {before[path]!r}")
            if path in after:
                lines.append(f"+ {path}: {after[path]!r}")
    return lines


def _said(results: list[Result] | dict[str, Result]) -> str:
    items = results.values() if isinstance(results, dict) else results
    return "; ".join(f"{r.engine}: {r.action} {list(r.reasons)}" for r in items)


def render(report: SuiteReport, cases_path: Path | None = None) -> str:
    """Coverage tables (per code, per rule), failures with their input, disagreements, verdict."""
    engines = list(report.results)
    lines = [
        f"cases: {cases_path} ({len(report.cases)} selected, {'full run' if report.full else 'selection'})"
        if cases_path
        else f"{len(report.cases)} cases"
    ]
    head = f"{'code':<26}{'allow':>6}{'deny':>6}{'bypass':>7}" + "".join(f"{e:>10}" for e in engines)
    lines += [head, "-" * len(head)]
    for cov in coverage(report.cases, rule_codes(report.pack)):
        row = f"{cov.rule:<26}{cov.counts['allow']:>6}{cov.counts['deny']:>6}{cov.counts['bypass']:>7}"
        for e in engines:
            mine = [r for r in report.results[e] if r.case.rule == cov.rule]
            row += f"{sum(r.ok for r in mine):>5}/{len(mine):<4}"
        lines.append(row + ("" if cov.complete else "  <- needs ALLOW and DENY cases"))
    total = len(report.cases)
    lines.append("-" * len(head))
    lines.append(f"{'total':<45}" + "".join(f"{sum(r.ok for r in report.results[e]):>5}/{total:<4}" for e in engines))
    lines.append("")
    lines.append("rules: cases each Cedar policy decided / whether each Rego deny rule fired")
    for engine, fired in report.rules.items():
        for site, count in fired.items():
            shown = (str(count) if engine == "cedar" else "fired") if count else "never  <- no case fires this rule"
            lines.append(f"  {engine:<6}{site.where:<44}{site.name:<36}{shown}")
    if report.conditions or report.unevaluated or report.conditions_note:
        lines.append("conditions no case exercises (reported, not enforced; add a row that makes each one matter):")
        lines += [f"  {u}" for u in report.conditions]
        lines += [f"  opa   {line.replace(': ', ' is never evaluated: ', 1)}" for line in report.unevaluated]
        if report.conditions_note:
            lines.append(f"  {report.conditions_note}")
    for r in report.failures():
        want = f"{r.case.action.value} {list(r.case.reasons)}"
        lines.append(f"FAIL [{r.engine}] {r.case.id}: got {r.action} {list(r.reasons)}, want {want}")
        lines.append(f"     input (diff from base {r.case.base}):")
        lines += [f"       {d}" for d in input_diff(report.bases[r.case.base], r.case.inp)]
    for case, answers in report.disagreements():
        lines.append(f"DISAGREE {case.id}: {_said(answers)}")
    # Where one engine forwards what the other refuses comes first: that is a hole, not a wording.
    differences = sorted(report.differences, key=lambda d: all(r.action != "forward" for r in d[1].values()))
    for variant, said in differences[:25]:
        lines.append(f"DIFFER {variant.label}: {_said(said)}")
    if len(report.differences) > 25:
        lines.append(f"... and {len(report.differences) - 25} more mutated inputs on which the engines differ")
    if report.mutants:
        lines.append(f"differential: {report.mutants} mutated inputs, {len(report.differences)} disagreement(s)")
    problems = report.problems(with_cases=False)
    if not report.full:
        lines.append("coverage is shown but not enforced on a selection or a single table")
    verdict = "ok" if report.ok else "FAILED" + (f" ({'; '.join(problems)})" if problems else "")
    lines.append(f"{verdict}: {total} cases, {len(engines)} engine(s), {len(report.disagreements())} disagreement(s)")
    return "\n".join(lines)
