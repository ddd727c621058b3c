"""Configuration: one YAML file plus ``MEMGOV_*`` environment variables (``__`` nests).

Precedence, highest first: init arguments, environment, the YAML file (``--config`` or
``MEMGOV_CONFIG``), secrets read from the files named by ``*_file`` keys, defaults. Every key of
SPEC §5 exists here, one model per concern. Nothing is read at import time: call
:func:`load_settings`.
"""

from __future__ import annotations

import os
import re
import secrets
from enum import StrEnum
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sidecar.identity import IdentityError
from sidecar.identity.mxid import normalise_server_name, parse_mxid
from sidecar.secretfile import read_secret

#: The default policy pack, shipped as package data (sidecar/packaged/) and found through
#: importlib.resources. memgov is installed as files, so this is a folder the pack reader and the
#: file watcher can walk; its case tables are ``policy-tests`` beside it.
PACKAGED_POLICY_DIR = Path(str(files("sidecar").joinpath("packaged", "policies")))
DEV_DIR = Path(".memgov")


class SettingsError(Exception):
    """Configuration is invalid; the message names the offending key, never a secret value."""


def _parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT or :PORT")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise ValueError("an IPv6 address is written in brackets: [::]:8080")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_listen(value: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT…]`` → the addresses to bind (``[::]:8080`` for IPv6), at least one, no repeats."""
    addresses = [_parse_hostport(part) for part in value.split(",")]
    if len(set(addresses)) != len(addresses):
        raise ValueError("an address is listed twice")
    return addresses


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: A Kubernetes object name (DNS-1123 subdomain).
_K8S_NAME = r"[a-z0-9](?:[a-z0-9.\-]{0,251}[a-z0-9])?"


class UpstreamSettings(_Section):
    controller_url: str = Field("http://127.0.0.1:8083", description="kagent controller base URL.")
    embedding_url: str | None = Field(
        None, description="OpenAI-compatible embedding provider base URL (…/v1); unset turns the embedding route off."
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="Upstream TCP connect timeout in seconds.")
    read_timeout_s: float = Field(300.0, gt=0, description="Longest silence between upstream bytes, seconds.")
    total_timeout_s: float | None = Field(
        None, gt=0, description="Whole-request upstream timeout in seconds; unset for streaming routes."
    )
    pool_size: int = Field(
        256, ge=1, description="Connection pool for passthrough and A2A traffic (long streams live here)."
    )
    memory_pool_size: int = Field(
        64, ge=1, description="Separate connection pool for governed memory calls, so other traffic cannot starve them."
    )
    memory_timeout_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="Whole-request timeout of one memory call to kagent, seconds: an agent's governed save or"
        " search, and memgov's own listings, copies and deletions (erasure, rotation, inspect).",
    )
    embedding_api_key_file: Path | None = Field(
        None,
        description="memgov's own embedding-provider key, sent as 'Authorization: Bearer' when it re-embeds"
        " entries for a namespace rotation (agents' own calls keep their key).",
    )
    embedding_pool_size: int = Field(32, ge=1, description="Separate connection pool for embedding calls.")
    embedding_trust_env: bool = Field(
        False,
        description="Reach the embedding provider through the proxy named by HTTPS_PROXY/HTTP_PROXY/NO_PROXY (and"
        " netrc credentials), as aiohttp's trust_env does; kagent is always reached directly.",
    )
    embedding_timeout_s: float = Field(30.0, gt=0, le=300, description="Whole-request embedding timeout, seconds.")
    kagent_auth_mode: Literal["unsecure", "trusted-proxy"] = Field(
        "unsecure", description="kagent's --auth-mode; decides how the session key is carried on an invocation."
    )
    kagent_user_claim: str = Field("sub", description="kagent's --auth-user-id-claim (trusted-proxy mode).")
    kagent_refresh_s: float = Field(
        300.0,
        ge=5,
        le=86400,
        description="How often kagent's release and the memory agents' declared embedding models are read again.",
    )

    @field_validator("controller_url", "embedding_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v.rstrip("/") if v else v


class MaxConnections(_Section):
    data: int = Field(4096, ge=1, description="Open connections the data-plane listener holds at most (503 above).")
    control: int = Field(256, ge=1, description="Open connections the control API listener holds at most.")
    ops: int = Field(64, ge=1, description="Open connections the operations listener holds at most.")


class MaxConnectionsPerAddress(_Section):
    data: int = Field(256, ge=1, description="Open data-plane connections one peer address holds at most (429 above).")
    control: int = Field(32, ge=1, description="Open control API connections one peer address holds at most.")
    ops: int = Field(16, ge=1, description="Open operations connections one peer address holds at most.")


class ListenSettings(_Section):
    data: str = Field(
        "0.0.0.0:8080",
        description="Data-plane listener (kagent controller API in front); a comma-separated list binds each"
        " address, e.g. 0.0.0.0:8080,[::]:8080 for both address families.",
    )
    control: str = Field("0.0.0.0:8081", description="Control API listener (one address or a comma-separated list).")
    ops: str = Field(
        "0.0.0.0:9090", description="Operations listener: /metrics, /healthz, /readyz (one address or a list)."
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Largest request body accepted on the data plane (413 above)."
    )
    shutdown_timeout_s: float = Field(
        30.0, gt=0, description="On SIGTERM, how long requests in flight (streams included) may still finish."
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="Every request body must arrive completely within this many seconds (408 otherwise)."
    )
    body_min_rate_bps: int = Field(
        1024, ge=0, description="After the first second a request body must keep this average rate (408 otherwise)."
    )
    max_concurrent_per_client: int = Field(
        64, ge=1, description="Requests in flight per client address and traffic group (429 concurrency_limited above)."
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="A request head must be complete this many seconds after the connection is accepted, and after"
        " each response on a kept-alive connection; otherwise the connection is closed (an idle one too).",
    )
    max_header_bytes: int = Field(
        32768,
        ge=8192,
        le=1024 * 1024,
        description="Largest unfinished request head, in bytes, on every listener; one that grows past it is"
        " answered 431 and closed.",
    )
    max_connections: MaxConnections = Field(
        default_factory=MaxConnections,
        description="Open connections per listener and process; one more is answered and closed at accept.",
    )
    max_connections_per_address: MaxConnectionsPerAddress = Field(
        default_factory=MaxConnectionsPerAddress,
        description="Open connections per TCP peer address, listener and process (at most the listener's cap); one"
        " more is answered and closed at accept (X-Forwarded-For is never read).",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Gateway processes sharing these ports (SO_REUSEPORT) and the state store; more than one needs "
        "a writable temporary folder for merged metrics. `memgov serve --workers N` overrides it.",
    )

    @field_validator("data", "control", "ops")
    @classmethod
    def _hostport(cls, v: str) -> str:
        parse_listen(v)
        return v

    def addresses(self, name: Literal["data", "control", "ops"]) -> list[tuple[str, int]]:
        """Every (host, port) one listener binds."""
        return parse_listen(getattr(self, name))

    def address(self, name: Literal["data", "control", "ops"]) -> tuple[str, int]:
        """The first (host, port) of one listener: where a local client reaches it."""
        return self.addresses(name)[0]


class StateSettings(_Section):
    url: str = Field("sqlite:///./.memgov/state.db", description="State store: sqlite:///path or postgresql://…")
    url_file: Path | None = Field(None, description="File holding the state URL (overrides url; for credentials).")
    pool_size: int = Field(
        10, ge=1, description="PostgreSQL connection pool size; agents' calls hold at most all but two of it."
    )
    auto_migrate: bool = Field(
        True,
        description="`memgov serve` applies pending schema migrations as it starts; false: it only checks the"
        " schema and refuses to start on one that is not migrated (`memgov state migrate` runs them).",
    )
    check_interval_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="How often a running gateway checks that the state store answers (every second while it"
        " does not, and at once when a call failed as if it were gone).",
    )
    statement_timeout_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="PostgreSQL: longest wait for one statement (BEGIN and COMMIT included); a store that does not"
        " answer in time counts as unavailable (state_unavailable) and the connection is ended.",
    )
    acquire_timeout_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="PostgreSQL: longest wait for a pooled connection (a new connection's handshake included).",
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return v


class PolicySettings(_Section):
    engine: Literal["cedar", "opa", "shadow"] = Field("cedar", description="Policy engine: cedar, opa or shadow.")
    dir: Path = Field(PACKAGED_POLICY_DIR, description="Policy pack folder (cedar/, rego/, data/).")
    opa_url: str = Field("http://127.0.0.1:8181", description="OPA server for the opa and shadow engines.")
    opa_timeout_s: float = Field(0.5, gt=0, description="OPA decision timeout; a timeout denies (policy_unavailable).")
    shadow_primary: Literal["cedar", "opa"] = Field("cedar", description="Engine that enforces in shadow mode.")
    reload_interval_s: float = Field(2.0, ge=0, description="Poll interval for pack changes; 0 disables polling.")


class SecretsSettings(_Section):
    session_key_file: Path | None = Field(
        None, description="HMAC key for session/storage keys; generated under ./.memgov/ in dev when unset."
    )
    previous_session_key_file: Path | None = Field(
        None,
        description="Previous HMAC key, still accepted for verification during rotation (a missing file: none).",
    )
    next_session_key_file: Path | None = Field(
        None,
        description="Next HMAC key, accepted for verification before any replica mints with it: the first step"
        " of a rotation (a missing file: none).",
    )
    reload_interval_s: float = Field(
        10.0,
        ge=0,
        description="How often key files and folders (secrets.*, trust.*) are read again; a changed one is used"
        " from then on, one that does not load keeps the keys in use. 0 reads them once at start.",
    )


class TrustSettings(_Section):
    bridge_key_file: Path | None = Field(
        None, description="Verifies delegation contexts and subject tokens (HS256 secret or PEM public key)."
    )
    operator_key_file: Path | None = Field(None, description="Verifies operator tokens (role: operator).")
    bridge_keys_dir: Path | None = Field(
        None,
        description="Folder of bridge verification keys, one file each, named by its key id (the tokens' kid);"
        " instead of bridge_key_file, for rotation.",
    )
    operator_keys_dir: Path | None = Field(
        None,
        description="Folder of operator verification keys, one file each, named by its key id (the tokens' kid);"
        " instead of operator_key_file, for rotation.",
    )
    context_max_age_s: int = Field(120, ge=1, le=120, description="Longest accepted context lifetime (exp - iat).")
    subject_max_age_s: int = Field(
        300, ge=1, le=3600, description="Longest accepted subject-token lifetime (exp - iat); jti is required."
    )
    operator_max_age_s: int = Field(3600, ge=1, le=86400, description="Longest accepted operator-token lifetime.")


class MatrixSettings(_Section):
    server_name: str | None = Field(None, description="The local homeserver name; required for memory.")
    bridge_bot: str | None = Field(None, description="MXID of the bridge bot (allowed control-room member).")

    @field_validator("server_name")
    @classmethod
    def _server(cls, v: str | None) -> str | None:
        return None if v is None else _identity_check("server_name", v)

    @field_validator("bridge_bot")
    @classmethod
    def _bot(cls, v: str | None) -> str | None:
        return None if v is None else _identity_check("mxid", v)


class AgentSettings(_Section):
    disabled_variant: str = Field(..., description="Name of the memory-disabled Agent in the same namespace.")
    ghost: str = Field(..., description="MXID of the agent's Matrix ghost (allowed control-room member).")
    embedding_model: str | None = Field(
        None,
        description="The embedding model the agent's runtime uses (the chart takes it from the agent's declared"
        " memory ModelConfig); namespace rotation re-embeds with it. Unset: that agent's forget-one and hard"
        " expiry stay pending until the namespace is cleared (never a model named by traffic).",
    )
    embedding_dimensions: int | None = Field(
        None, ge=1, le=65536, description="'dimensions' to send with the pinned model (kagent's runtimes send 768)."
    )
    model_configs: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="The kagent ModelConfigs the agent uses (its modelConfig, memory.modelConfig and summarizer):"
        " names in the agent's namespace or namespace/name. Changing one needs an operator token, like the"
        " agent's own definition.",
    )

    @field_validator("model_configs")
    @classmethod
    def _model_configs(cls, v: list[str]) -> list[str]:
        for ref in v:
            if not re.fullmatch(rf"(?:{_K8S_NAME}/)?{_K8S_NAME}", ref):
                raise ValueError("each entry must be a Kubernetes object name or namespace/name")
        return v

    @field_validator("embedding_model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/@+\-]{0,127}", v):
            raise ValueError("must be a provider model id (letters, digits, ._:/@+-, at most 128)")
        return v

    @field_validator("ghost")
    @classmethod
    def _ghost(cls, v: str) -> str:
        return _identity_check("mxid", v)

    @field_validator("disabled_variant")
    @classmethod
    def _variant(cls, v: str) -> str:
        if not re.fullmatch(_K8S_NAME, v):
            raise ValueError("must be a Kubernetes object name")
        return v


def _identity_check(kind: str, value: str) -> str:
    """Validate an MXID or server name with the identity grammar; the canonical form is kept."""
    try:
        return normalise_server_name(value) if kind == "server_name" else str(parse_mxid(value))
    except IdentityError:
        raise ValueError(f"not a valid {'server name' if kind == 'server_name' else 'Matrix user id'}") from None


#: A label or annotation key: an optional DNS prefix and a name (Kubernetes' qualified name).
_LABEL_KEY = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9.\-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._\-]{0,61}[A-Za-z0-9])?"
)


class BoundarySettings(_Section):
    """What a kagent definition relayed through memgov may never claim (docs/security.md).

    Whatever is set here, a definition is also refused for the markers every memgov carries: the
    label ``app.kubernetes.io/name: memgov``, any label or annotation key under ``memgov/``, and
    the name ``memgov``. The chart fills every list from its own templates.
    """

    selectors: list[dict[str, str]] = Field(
        default_factory=list,
        max_length=8,
        description="Label sets of the pods memgov's boundary lets through or sends to: memgov's own selector"
        " labels, kagent's controller and UI pods. A definition carrying any one label of them is refused.",
    )
    marker_keys: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Label and annotation keys that mark the boundary (e.g. an exception label), refused with"
        " any value.",
    )
    service_accounts: list[str] = Field(
        default_factory=list, max_length=8, description="memgov's service accounts: no definition may run as one."
    )
    secrets: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="The Secrets memgov reads its keys and URLs from: no definition may refer to one, by any field.",
    )
    names: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Names of memgov's own objects (Service, Deployment, ConfigMaps, claim): no definition may"
        " take one, since kagent names the objects it creates for a definition after it.",
    )
    name_prefixes: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Prefixes of the names of memgov's own objects (the chart's '<full name>-'): no definition's"
        " name may start with one.",
    )
    kagent_namespace: str = Field(
        "kagent", description="kagent's own namespace, where kagent puts a definition that names no namespace."
    )

    @field_validator("selectors")
    @classmethod
    def _selectors(cls, v: list[dict[str, str]]) -> list[dict[str, str]]:
        for labels in v:
            if not labels or any(_LABEL_KEY.fullmatch(k) is None for k in labels):
                raise ValueError("each selector is a non-empty map of label keys to values")
        return v

    @field_validator("marker_keys")
    @classmethod
    def _markers(cls, v: list[str]) -> list[str]:
        if any(_LABEL_KEY.fullmatch(k) is None for k in v):
            raise ValueError("each marker key must be a label key")
        return v

    @field_validator("service_accounts", "secrets", "names")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        if any(re.fullmatch(_K8S_NAME, n) is None for n in v):
            raise ValueError("each entry must be a Kubernetes object name")
        return v

    @field_validator("name_prefixes")
    @classmethod
    def _prefixes(cls, v: list[str]) -> list[str]:
        if any(re.fullmatch(r"[a-z0-9][a-z0-9.\-]{0,252}", p) is None for p in v):
            raise ValueError("each entry must be the start of a Kubernetes object name")
        return v

    @field_validator("kagent_namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if re.fullmatch(r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?", v) is None:
            raise ValueError("must be a Kubernetes namespace name")
        return v


class AdapterName(StrEnum):
    """How memgov deletes kagent's rows: whole namespaces over its REST API, or by id through a
    least-privilege role on its database (docs/erasure.md)."""

    REST = "rest"
    KAGENT_DB = "kagent-db"


class ErasureSettings(_Section):
    adapter: AdapterName = Field(AdapterName.REST, description="Erasure adapter: rest or kagent-db.")
    kagent_db_url: str | None = Field(None, description="Least-privilege role on kagent's database (kagent-db).")
    kagent_db_url_file: Path | None = Field(None, description="File holding kagent_db_url.")
    sweep_interval_s: float = Field(3600.0, gt=0, description="Hard-expiry and dead-generation sweeper interval.")
    quiesce_timeout_s: float = Field(10.0, gt=0, description="Longest wait for in-flight writes before deleting.")
    history_grace_s: float = Field(
        86400.0,
        ge=0,
        description="How long a final ledger row or cleared namespace stays before the sweeper compacts it (each"
        " erasure keeps its own evidence of them; the erasure runbook keeps terminal records at least a day).",
    )
    run_lease_s: float = Field(
        10.0,
        ge=1,
        le=300,
        description="How long one process's claim on a running erasure lasts unless renewed (every third of it):"
        " after a crash, another process takes the erasure over once it lapses.",
    )
    rotate: bool = Field(
        True,
        description="With the rest adapter and an embedding provider: make forget-one and hard expiry exact by"
        " rotating the scope's namespace (re-embeds the entries it keeps).",
    )


class EnforceSettings(_Section):
    prefetch_window_s: int = Field(
        60, ge=1, le=3600, description="Searches this soon after a new conversation's invocation count as prefetch."
    )
    write_lease_s: int = Field(
        30,
        ge=1,
        le=600,
        description="How long a write of unknown outcome may still land after its upstream call ended (erasure waits).",
    )


class AuditSettings(_Section):
    retention_days: int = Field(
        90, ge=1, le=3650, description="Audit records older than this are purged by the sweeper (own window, R-15)."
    )
    spool_records: int = Field(
        10_000,
        ge=0,
        le=1_000_000,
        description="Audit records kept in memory while the state store is down and written when it is back;"
        " beyond this they are counted in memgov_audit_spool_dropped_total.",
    )
    spool_dir: Path | None = Field(
        None,
        description="Folder that keeps the spooled audit records on disk (files of mode 0600, content-free), so"
        " a process killed during an outage loses none: the next one replays them, each exactly once. Unset:"
        " in memory only. Give each deployment its own folder.",
    )


class TracingSettings(_Section):
    enabled: bool = Field(False, description="Export OpenTelemetry traces (content-free spans) over OTLP/HTTP.")
    endpoint: str = Field("http://127.0.0.1:4318/v1/traces", description="OTLP/HTTP traces endpoint of the collector.")
    sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Share of new traces recorded; a caller's sampled traceparent is followed."
    )
    service_name: str = Field("memgov", min_length=1, max_length=64, description="service.name of the spans.")
    timeout_s: float = Field(5.0, gt=0, description="Export timeout in seconds.")

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v


class LogSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Lowest level emitted.")


class Settings(BaseSettings):
    """All memgov settings."""

    model_config = SettingsConfigDict(
        env_prefix="MEMGOV_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        nested_model_default_partial_update=True,
    )

    profile: Literal["dev", "production"] = Field(
        "dev", description="dev generates missing secrets under ./.memgov/; production refuses placeholders."
    )
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings, description="Upstreams.")
    listen: ListenSettings = Field(default_factory=ListenSettings, description="Listeners.")
    state: StateSettings = Field(default_factory=StateSettings, description="State store.")
    policy: PolicySettings = Field(default_factory=PolicySettings, description="Policy engine.")
    secrets: SecretsSettings = Field(default_factory=SecretsSettings, description="Secret files.")
    trust: TrustSettings = Field(default_factory=TrustSettings, description="Token verification keys.")
    matrix: MatrixSettings = Field(default_factory=MatrixSettings, description="Matrix deployment facts.")
    agents: dict[str, AgentSettings] = Field(default_factory=dict, description="Memory-enabled agents by ns/name.")
    boundary: BoundarySettings = Field(
        default_factory=BoundarySettings, description="What relayed kagent definitions may never claim."
    )
    erasure: ErasureSettings = Field(default_factory=ErasureSettings, description="Erasure.")
    enforce: EnforceSettings = Field(default_factory=EnforceSettings, description="Enforcement tuning.")
    audit: AuditSettings = Field(default_factory=AuditSettings, description="Audit record retention.")
    log: LogSettings = Field(default_factory=LogSettings, description="Logging.")
    tracing: TracingSettings = Field(default_factory=TracingSettings, description="OpenTelemetry traces.")

    @field_validator("agents")
    @classmethod
    def _agent_refs(cls, v: dict[str, AgentSettings]) -> dict[str, AgentSettings]:
        for ref in v:
            ns, sep, name = ref.partition("/")
            if not sep or not ns or not name or "/" in name:
                raise ValueError(f"agent key {ref!r} must be namespace/name")
        return v

    @model_validator(mode="after")
    def _one_source_of_trust(self) -> Settings:
        trust = self.trust
        for name, file, folder in (
            ("bridge", trust.bridge_key_file, trust.bridge_keys_dir),
            ("operator", trust.operator_key_file, trust.operator_keys_dir),
        ):
            if file is not None and folder is not None:
                raise ValueError(f"trust.{name}_key_file and trust.{name}_keys_dir are exclusive")
        return self

    @model_validator(mode="after")
    def _production_guards(self) -> Settings:
        if self.profile == "production":
            # SECURITY: production never runs on a generated or missing secret.
            if self.secrets.session_key_file is None:
                raise ValueError("secrets.session_key_file is required when profile is production")
            erasure = self.erasure
            if erasure.adapter is AdapterName.KAGENT_DB and not (erasure.kagent_db_url or erasure.kagent_db_url_file):
                raise ValueError("erasure.kagent_db_url(_file) is required for the kagent-db adapter")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls))

    def state_url(self) -> str:
        """Return the state URL, read from ``state.url_file`` when set."""
        if self.state.url_file is not None:
            return read_secret(self.state.url_file, "state.url_file").decode().strip()
        return self.state.url

    def embedding_api_key(self) -> bytes | None:
        """Return memgov's own embedding-provider key, read from its file when set."""
        if self.upstream.embedding_api_key_file is None:
            return None
        key = read_secret(self.upstream.embedding_api_key_file, "upstream.embedding_api_key_file")
        if not key.isascii() or not key.decode().isprintable() or b" " in key:
            raise SettingsError("upstream.embedding_api_key_file: the key must be printable ASCII without spaces")
        return key

    def kagent_db_url(self) -> str | None:
        """Return the kagent-db erasure URL, read from its file when set."""
        if self.erasure.kagent_db_url_file is not None:
            return read_secret(self.erasure.kagent_db_url_file, "erasure.kagent_db_url_file").decode().strip()
        return self.erasure.kagent_db_url

    def session_keys(self) -> tuple[bytes, bytes | None, bytes | None]:
        """Return (current, previous, next) HMAC keys; in dev a missing current key is generated once. A
        previous or next file that does not exist holds no key (a rotation step removed it)."""
        if self.secrets.session_key_file is None:
            path = DEV_DIR / "session.key"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_hex(32))
            current = read_secret(path, "secrets.session_key_file")
        else:
            current = read_secret(self.secrets.session_key_file, "secrets.session_key_file")
        return (
            current,
            _optional_secret(self.secrets.previous_session_key_file, "secrets.previous_session_key_file"),
            _optional_secret(self.secrets.next_session_key_file, "secrets.next_session_key_file"),
        )


def _optional_secret(path: Path | None, key: str) -> bytes | None:
    """The secret of a file that may be absent (None then); one that exists must be a real secret."""
    if path is None or not Path(path).exists():
        return None
    return read_secret(path, key)


class _YamlSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by ``MEMGOV_CONFIG`` (set by ``--config``)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get("MEMGOV_CONFIG")
        if not path:
            return {}
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"config file {path}: {type(exc).__name__}") from None
        if not isinstance(data, dict):
            raise SettingsError(f"config file {path}: top level must be a mapping")
        return data


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Build settings from the YAML file, the environment and overrides; errors name the key."""
    if config is not None:
        os.environ["MEMGOV_CONFIG"] = str(config)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "settings"
            lines.append(f"{key}: {err['msg']}")
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(lines)) from None
