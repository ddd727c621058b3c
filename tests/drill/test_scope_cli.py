"""`memgov scope …` drives every control API endpoint of a running gateway and reports refusals by code."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from sidecar.dev.devstack.store import DbFault
from sidecar.drill.actors import PURPOSE

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"


def _base(dep, token_file: Path) -> list[str]:
    return ["scope", "--control-url", dep.target.control_url, "--token-file", str(token_file)]


def _mint_flags(dep) -> list[str]:
    t = dep.target
    return [
        "--bridge-key-file",
        str(dep.keys["bridge"]),
        "--server-name",
        t.server_name,
        "--bridge-bot",
        t.bridge_bot,
        "--ghost",
        t.agents[0].ghost,
    ]


class TestScopeCommands:
    async def test_create_consent_status_withdraw(self, deployment, memgov, tmp_path):
        """A subject creates its scope, consents, reads its status and withdraws, all from the command line."""
        dep = deployment
        subject = dep.run.subject("cli")

        def base() -> list[str]:  # the bridge signs a fresh, single-use token for each command
            return _base(dep, dep.token_file(tmp_path, dep.run.subject_token(subject)))

        code, out, _ = await memgov(
            *base(),
            "--json",
            "create",
            "--mxid",
            subject,
            "--agent",
            dep.target.agents[0].ref,
            "--room",
            dep.run.room(),
        )
        assert code == 0
        scope_id = json.loads(out)["scope_id"]
        spent = base()
        code, out, _ = await memgov(*spent, "consent", scope_id, "--purpose", PURPOSE, "--policy-version", "v2")
        assert (code, "enabled yes, generation 1") == (0, out.splitlines()[0].split(": ", 1)[1])
        code, _, err = await memgov(*spent, "withdraw", scope_id)
        assert code == 1 and "refused: auth_required (HTTP 401" in err  # a spent token changes nothing
        code, out, _ = await memgov(*base(), "status", scope_id)
        assert code == 0
        assert "0 live of 5" in out and "policy v2" in out and "7 days after creation" in out
        code, out, _ = await memgov(*base(), "withdraw", scope_id)
        assert code == 0 and "enabled no, generation 2" in out and "(withdraw): verified" in out

    async def test_inspect_pages_and_forget_one(self, deployment, memgov, tmp_path):
        """Inspect shows the subject's own entries page by page; forget erases exactly the one named."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        facts = await dep.run.remember(scope, 2, "cli")
        base = _base(dep, dep.token_file(tmp_path, dep.run.subject_token(scope.subject)))
        code, out, _ = await memgov(*base, "inspect", scope.scope_id, "--all", *_mint_flags(dep))
        assert code == 0 and all(f in out for f in facts)
        code, out, _ = await memgov(*base, "--json", "inspect", scope.scope_id, "--limit", "1", *_mint_flags(dep))
        page = json.loads(out)
        assert code == 0 and len(page["entries"]) == 1 and page["next_cursor"] == page["entries"][0]["id"]
        forgotten = page["entries"][0]
        code, out, _ = await memgov(*base, "forget", scope.scope_id, forgotten["id"])
        assert code == 0 and "(forget_one): verified" in out and "physical deletion complete" in out
        assert re.search(r"rotation e[0-9a-f]{24}: verified", out)
        code, out, _ = await memgov(*base, "inspect", scope.scope_id, "--all", *_mint_flags(dep))
        assert code == 0 and forgotten["text"] not in out and len(re.findall(r"created ", out)) == 1

    @pytest.mark.parametrize("lines, expected", [(3, 0), (1, 2)])
    async def test_inspect_with_context_file(self, deployment, memgov, tmp_path, lines, expected):
        """Every page uses the next bridge-signed context of the file; running out is a usage error."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        await dep.run.remember(scope, 2, "cli")
        contexts = tmp_path / "contexts"
        contexts.write_text("\n".join(dep.run.context(scope.subject, scope.agent, scope.room) for _ in range(lines)))
        base = _base(dep, dep.token_file(tmp_path, dep.run.subject_token(scope.subject)))
        code, _, err = await memgov(
            *base, "inspect", scope.scope_id, "--all", "--limit", "1", "--context-file", str(contexts)
        )
        assert code == expected
        assert ("no context left" in err) == (expected == 2)

    @pytest.mark.parametrize("command", ["off", "forget-all"])
    async def test_confirmation_then_confirm(self, deployment, memgov, tmp_path, command):
        """Without confirmation nothing is erased and the token is printed; with it the erasure runs."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        await dep.run.remember(scope, 1, "cli")
        base = _base(dep, dep.token_file(tmp_path, dep.run.subject_token(scope.subject)))
        code, out, _ = await memgov(*base, command, scope.scope_id)
        token = re.search(r"--confirm (\S+)", out).group(1)
        assert re.fullmatch(r"[0-9a-f]{64}", token), "a token must be safe to paste as a command-line argument"
        assert code == 5 and (await dep.run.status(scope))["entries"]["live"] == 1
        code, out, _ = await memgov(*base, command, scope.scope_id, "--confirm", token)
        status = await dep.run.status(scope)
        assert code == 0 and "verified" in out
        assert (status["enabled"], status["entries"]["live"]) == (command == "forget-all", 0)

    async def test_yes_offboard_and_evidence_export(self, deployment, memgov, tmp_path):
        """--yes confirms at once; an operator offboards the subject; evidence exports as a JSON file."""
        dep = deployment
        subject = dep.run.subject("cli")
        first, second = await dep.run.new_scope(subject), await dep.run.new_scope(subject)
        await dep.run.remember(first, 1, "cli")
        base = _base(dep, dep.token_file(tmp_path, dep.run.subject_token(subject)))
        code, out, _ = await memgov(*base, "--json", "forget-all", first.scope_id, "--yes")
        erasure_id = json.loads(out)["erasure_id"]
        assert code == 0
        operator = _base(dep, dep.token_file(tmp_path, dep.run.operator_token(), "operator"))
        code, out, _ = await memgov(*operator, "offboard", subject)
        assert code == 0 and "offboarding complete: 2 scope(s)" in out
        assert first.scope_id in out and second.scope_id in out
        exported = tmp_path / "evidence.json"
        code, out, _ = await memgov(*base, "erasure", erasure_id, "--output", str(exported))
        record = json.loads(exported.read_text())
        assert code == 0 and f"evidence written to {exported}" in out
        assert (record["format"], record["kind"], record["state"]) == ("memgov.erasure.v1", "forget_all", "verified")


def _runbook_commands(section: str) -> list[str]:
    """The ``memgov …`` commands of one alert's section of docs/runbook.md, as written there."""
    text = RUNBOOK.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`(memgov [^`]+)`", text)


class TestErasureCommands:
    async def test_the_runbooks_erasure_commands_list_read_and_retry(self, deployment, memgov, tmp_path):
        """The MemgovErasureFailed steps, run exactly as written: the list names the failure, its evidence
        reads, the retry verifies it, and the list of what the alert counts is then empty."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        await dep.run.remember(scope, 1, "cli")
        dep.local.dev.store.fault = DbFault(times=100)
        code, _, err = await memgov(
            *_base(dep, dep.token_file(tmp_path, dep.run.subject_token(scope.subject))), "off", scope.scope_id, "--yes"
        )
        assert code == 3
        failed_id = err.split("evidence at /v1/erasures/", 1)[1].split()[0]
        token_file = dep.token_file(tmp_path, dep.run.operator_token(), "operator")
        listing, evidence, retry = _runbook_commands("MemgovErasureFailed")

        def argv(command: str) -> list[str]:
            written = command.replace("<erasure id>", failed_id).replace("$CONTROL", dep.target.control_url)
            return [str(token_file) if a == "operator.jwt" else a for a in shlex.split(written)[1:]]

        code, out, _ = await memgov(*argv(listing))
        assert code == 0 and out.startswith(f"{failed_id} {scope.scope_id} off failed (upstream_error)")
        code, out, _ = await memgov(*argv(evidence))
        assert code == 0 and f"erasure {failed_id} (off): failed" in out
        code, out, err = await memgov(*argv(retry))
        assert code == 3 and "failed: upstream_error (HTTP 502" in err  # kagent still fails: a failed retry
        dep.local.dev.store.fault = None
        code, out, _ = await memgov(*argv(retry))
        assert code == 0 and "(off): verified" in out
        code, out, _ = await memgov(*argv(listing))
        assert (code, out) == (0, "no erasure matches\n")
        code, out, _ = await memgov(*argv(listing)[:-1])  # without --open
        assert code == 0 and f"{failed_id} " in out and "superseded by e" in out
        operator = ["erasures", "--control-url", dep.target.control_url, "--token-file", str(token_file)]
        code, out, _ = await memgov(*operator, "--json", "list", "--scope", scope.scope_id, "--all")
        assert code == 0 and len(json.loads(out)["erasures"]) == 3
        subject = ["erasures", "--control-url", dep.target.control_url]
        subject += ["--token-file", str(dep.token_file(tmp_path, dep.run.subject_token(scope.subject)))]
        code, _, err = await memgov(*subject, "list")
        assert code == 1 and "memgov erasures: refused: route_denied (HTTP 403" in err


class TestScopeErrors:
    @pytest.mark.parametrize(
        "who, command, status, reason",
        [
            ("nobody", "status", 401, "auth_required"),
            ("peer", "status", 403, "not_subject"),
            ("operator", "status", 403, "not_subject"),
            ("subject", "offboard", 403, "route_denied"),
            ("subject", "forget", 404, "not_found"),
            ("subject", "off-wrong-token", 409, "confirmation_required"),
        ],
    )
    async def test_refusals_exit_one_with_code_and_decision(
        self, deployment, memgov, tmp_path, who, command, status, reason
    ):
        """A refusal prints its reason code and decision id on stderr, or as JSON, and exits 1."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        tokens = {
            "subject": dep.run.subject_token(scope.subject),
            "peer": dep.run.subject_token(dep.run.subject("peer")),
            "operator": dep.run.operator_token(),
        }
        base = ["scope", "--control-url", dep.target.control_url]
        if who in tokens:
            base += ["--token-file", str(dep.token_file(tmp_path, tokens[who]))]
        rest = {
            "status": ["status", scope.scope_id],
            "offboard": ["offboard", scope.subject],
            "forget": ["forget", scope.scope_id, "no-such-entry"],
            "off-wrong-token": ["off", scope.scope_id, "--confirm", "not-the-token"],
        }[command]
        code, out, err = await memgov(*base, *rest)
        assert code == 1 and f"refused: {reason} (HTTP {status}, decision d_" in err and out == ""
        code, out, _ = await memgov(*base, "--json", *rest)
        body = json.loads(out)
        assert (code, body["error"], body["status"]) == (1, reason, status) and body["decision_id"].startswith("d_")

    async def test_failed_erasure_exits_three_with_evidence_location(self, deployment, memgov, tmp_path):
        """When kagent fails during off, the command exits 3 with the reason and where the evidence is."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        await dep.run.remember(scope, 1, "cli")
        dep.local.dev.store.fault = DbFault(times=100)
        code, _, err = await memgov(
            *_base(dep, dep.token_file(tmp_path, dep.run.subject_token(scope.subject))), "off", scope.scope_id, "--yes"
        )
        dep.local.dev.store.fault = None
        assert code == 3 and "failed: upstream_error (HTTP 502" in err and "evidence at /v1/erasures/e" in err

    async def test_local_and_transport_errors(self, deployment, memgov, tmp_path):
        """Usage problems exit 2, an unreachable control API exits 4, and no token is ever echoed."""
        dep = deployment
        scope = await dep.run.new_scope(dep.run.subject("cli"))
        token = dep.run.subject_token(scope.subject)
        token_file = dep.token_file(tmp_path, token)
        outputs = []
        for argv, expected in [
            (
                [
                    "scope",
                    "--control-url",
                    dep.target.control_url,
                    "--token-file",
                    str(tmp_path / "missing"),
                    "status",
                    scope.scope_id,
                ],
                2,
            ),
            ([*_base(dep, token_file), "inspect", scope.scope_id], 2),
            (
                [
                    "scope",
                    "--control-url",
                    "http://127.0.0.1:9",
                    "--token-file",
                    str(token_file),
                    "status",
                    scope.scope_id,
                ],
                4,
            ),
            (["scope", "--control-url", dep.target.control_url, "--token", token, "status", scope.scope_id], 0),
        ]:
            code, out, err = await memgov(*argv)
            assert code == expected, (argv[-2:], code, err)
            outputs.append(out + err)
        assert all(token not in text for text in outputs)
