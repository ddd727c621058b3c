"""`memgov demo` tells the whole story end to end and every step shows the expected decision."""

from __future__ import annotations

import subprocess
import sys


class TestDemo:
    def test_demo_story(self):
        """The demo runs to completion and prints each governed outcome."""
        out = subprocess.run([sys.executable, "-m", "sidecar", "demo"], capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-2000:]
        text = out.stdout
        expected = [
            "rewrite_disabled; reason=consent_missing",
            "answered by: kagent/k8s-agent-nomem",
            "memgov: forward; reason=allowed",
            "(session key)",
            "under user_id mgs1.",
            "recalled: my favourite tea is sencha",
            '"my favourite tea is sencha"  hard expiry',
            "physical_deletion=complete",
            "rows kagent holds for Alice after the forget: 0",
            "recalled: nothing (the forgotten entry is unreadable)",
            "recalled: nothing (expired entries are unreadable)",
            "late auto-save with the old session key: HTTP 403",
            '"result": "passed"',
            "rows kagent holds for Alice now: 0",
            "status without a token: HTTP 401 auth_required",
        ]
        missing = [line for line in expected if line not in text]
        assert not missing, missing
