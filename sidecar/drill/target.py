"""What a drill runs against: URLs, the keys it signs and computes with, and the identities it plays.

The drill stands where an in-cluster job with the deployment's Secrets mounted would stand: it
signs delegation contexts and subject tokens as the bridge, operator tokens as an operator, and
computes session keys as the agent runtime receives them. Key material never appears in a
``repr``, in output or in the evidence bundle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict
from urllib.parse import urlsplit, urlunsplit

from sidecar.identity import IdentityError, tokens
from sidecar.identity.appname import app_name, parse_agent_ref
from sidecar.identity.mxid import parse_mxid
from sidecar.identity.tokens import SigningKey
from sidecar.policy.model import Limits
from sidecar.secretfile import SecretError, read_secret


class DrillConfigError(Exception):
    """The drill cannot be set up; the message names an option, never a secret."""


def load_signing_key(path: Path, option: str) -> SigningKey:
    """Read a signing key file (``identity.tokens.load_signing_key``); errors name the option."""
    try:
        return tokens.load_signing_key(path, option)
    except SecretError as exc:
        raise DrillConfigError(str(exc)) from None


def load_session_secret(path: Path, option: str = "--session-key-file") -> bytes:
    """The gateway's session-key secret, read exactly as the gateway reads it."""
    try:
        return read_secret(path, option)
    except SecretError as exc:
        raise DrillConfigError(str(exc)) from None


@dataclass(frozen=True)
class Agent:
    """A memory-enabled agent: ``ns/name``, its Matrix ghost and the app_name its runtime presents."""

    ref: str
    ghost: str
    app: str

    @classmethod
    def of(cls, ref: str, ghost: str, app: str | None = None) -> Agent:
        """Validate the reference and ghost; the app_name defaults to kagent's derivation."""
        try:
            ns, name = parse_agent_ref(ref)
            ghost = str(parse_mxid(ghost))
        except IdentityError:
            raise DrillConfigError("--agent/--ghost: not an ns/name reference and a Matrix user id") from None
        return cls(ref, ghost, app or app_name(ns, name))


def _strip_credentials(url: str | None) -> str | None:
    """A URL as it may appear in evidence: without user info, query or fragment."""
    if url is None:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class TargetDescription(TypedDict):
    """A target as the evidence bundle records it: URLs without credentials, no key material."""

    mode: Literal["devstack", "deployment"]
    data_url: str | None
    control_url: str | None
    ops_url: str | None
    kagent_url: str | None
    server_name: str
    bridge_bot: str
    subject: str
    agents: list[str]
    classification: str
    signing: dict[str, str]
    kagent_bearer: bool


@dataclass(frozen=True)
class Target:
    """One deployment (or the in-process devstack) and everything the drill needs to act on it."""

    mode: Literal["devstack", "deployment"]
    data_url: str
    control_url: str
    ops_url: str | None
    kagent_url: str | None
    bridge_key: SigningKey
    operator_key: SigningKey
    session_secret: bytes = field(repr=False)
    server_name: str
    bridge_bot: str
    subject: str
    room: str
    agents: tuple[Agent, ...]
    classification: str
    limits: Limits
    #: A bearer kagent accepts (its trusted-proxy mode parses but never verifies it): in a cluster,
    #: a token of the agent's service account. The drill sends it wherever the runtime or the bridge
    #: would send theirs; unset for kagent's default unsecure mode.
    kagent_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.agents:
            raise DrillConfigError("--agent: at least one memory-enabled agent is needed")
        try:
            parse_mxid(self.subject)
            parse_mxid(self.bridge_bot)
        except IdentityError:
            raise DrillConfigError("--subject/--bridge-bot: not a complete Matrix user id") from None
        if not self.room.startswith("!") or ":" not in self.room:
            raise DrillConfigError("--room: give a room id of the form !opaque:server")

    def describe(self) -> TargetDescription:
        """The content-free description recorded in the evidence bundle (no key material)."""
        return {
            "mode": self.mode,
            "data_url": _strip_credentials(self.data_url),
            "control_url": _strip_credentials(self.control_url),
            "ops_url": _strip_credentials(self.ops_url),
            "kagent_url": _strip_credentials(self.kagent_url),
            "server_name": self.server_name,
            "bridge_bot": self.bridge_bot,
            "subject": self.subject,
            "agents": [a.ref for a in self.agents],
            "classification": self.classification,
            "signing": {"bridge": self.bridge_key.alg, "operator": self.operator_key.alg},
            "kagent_bearer": self.kagent_token is not None,
        }

    def kagent_auth(self) -> dict[str, str]:
        """The Authorization header kagent wants from the runtime and the bridge (trusted-proxy mode)."""
        return {"Authorization": f"Bearer {self.kagent_token}"} if self.kagent_token else {}
