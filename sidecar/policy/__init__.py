"""Policy stage: decision input/output models, Cedar/OPA/shadow engines, the code floor, hot reload.

``await PolicyRuntime.start(settings.policy)`` loads the pack; ``await runtime.decide(inp)`` runs
the engine and then the floor and always answers (policy_unavailable when it cannot decide).
"""

from sidecar.identity.mxid import Origin
from sidecar.policy.model import Decision, DecisionInput, Deployment, Federation, Limits, Operation
from sidecar.policy.pack import PackError, load_federation, load_limits, read_pack
from sidecar.policy.runtime import PolicyRuntime
from sidecar.reasons import Action

__all__ = [
    "Action",
    "Decision",
    "DecisionInput",
    "Deployment",
    "Federation",
    "Limits",
    "Operation",
    "Origin",
    "PackError",
    "PolicyRuntime",
    "load_federation",
    "load_limits",
    "read_pack",
]
