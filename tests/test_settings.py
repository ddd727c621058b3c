"""Settings: SPEC §5 keys, environment and YAML precedence, secrets from files, clear errors."""

from __future__ import annotations

import pytest

from sidecar.secretfile import SecretError, read_secret
from sidecar.settings import SettingsError, load_settings

SPEC_KEYS = {
    "MEMGOV_UPSTREAM__CONTROLLER_URL": ("upstream", "controller_url", "http://127.0.0.1:8083"),
    "MEMGOV_UPSTREAM__EMBEDDING_URL": ("upstream", "embedding_url", None),
    "MEMGOV_LISTEN__DATA": ("listen", "data", "0.0.0.0:8080"),
    "MEMGOV_LISTEN__CONTROL": ("listen", "control", "0.0.0.0:8081"),
    "MEMGOV_LISTEN__OPS": ("listen", "ops", "0.0.0.0:9090"),
    "MEMGOV_STATE__URL": ("state", "url", "sqlite:///./.memgov/state.db"),
    "MEMGOV_POLICY__ENGINE": ("policy", "engine", "cedar"),
    "MEMGOV_POLICY__OPA_URL": ("policy", "opa_url", "http://127.0.0.1:8181"),
    "MEMGOV_SECRETS__SESSION_KEY_FILE": ("secrets", "session_key_file", None),
    "MEMGOV_TRUST__BRIDGE_KEY_FILE": ("trust", "bridge_key_file", None),
    "MEMGOV_TRUST__OPERATOR_KEY_FILE": ("trust", "operator_key_file", None),
    "MEMGOV_MATRIX__SERVER_NAME": ("matrix", "server_name", None),
    "MEMGOV_MATRIX__BRIDGE_BOT": ("matrix", "bridge_bot", None),
    "MEMGOV_ERASURE__ADAPTER": ("erasure", "adapter", "rest"),
    "MEMGOV_ERASURE__KAGENT_DB_URL": ("erasure", "kagent_db_url", None),
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("MEMGOV_"):
            monkeypatch.delenv(key)


class TestSettings:
    @pytest.mark.parametrize("env", sorted(SPEC_KEYS))
    def test_spec_keys_have_documented_defaults(self, env):
        """Every SPEC §5 key exists with its documented default."""
        section, key, default = SPEC_KEYS[env]
        assert getattr(getattr(load_settings(), section), key) == default

    def test_policy_dir_defaults_to_packaged_pack(self):
        """MEMGOV_POLICY__DIR defaults to the packaged policies/ folder."""
        assert load_settings().policy.dir.name == "policies"

    def test_environment_overrides_yaml(self, tmp_path, monkeypatch):
        """Environment variables win over the YAML file, which wins over defaults."""
        cfg = tmp_path / "c.yaml"
        cfg.write_text("upstream:\n  controller_url: http://yaml:1\nlisten:\n  data: 127.0.0.1:9999\n")
        monkeypatch.setenv("MEMGOV_CONFIG", str(cfg))
        monkeypatch.setenv("MEMGOV_UPSTREAM__CONTROLLER_URL", "http://env:2")
        s = load_settings()
        assert s.upstream.controller_url == "http://env:2"
        assert s.listen.data == "127.0.0.1:9999"

    def test_agents_from_json_environment(self, monkeypatch):
        """MEMGOV_AGENTS takes the SPEC's JSON map of memory-enabled agents."""
        monkeypatch.setenv(
            "MEMGOV_AGENTS",
            '{"kagent/k8s-agent": {"disabled_variant": "k8s-agent-nomem", "ghost": "@k8s:example.org"}}',
        )
        assert load_settings().agents["kagent/k8s-agent"].disabled_variant == "k8s-agent-nomem"

    @pytest.mark.parametrize(
        ("env", "value", "key"),
        [
            ("MEMGOV_POLICY__ENGINE", "rego", "policy.engine"),
            ("MEMGOV_LISTEN__DATA", "nonsense", "listen.data"),
            ("MEMGOV_STATE__URL", "mysql://x", "state.url"),
            ("MEMGOV_UPSTREAM__CONTROLLER_URL", "ftp://x", "upstream.controller_url"),
            ("MEMGOV_ERASURE__ADAPTER", "sql", "erasure.adapter"),
            ("MEMGOV_AGENTS", '{"noslash": {"disabled_variant": "x", "ghost": "@g:s"}}', "agents"),
            (
                "MEMGOV_AGENTS",
                '{"a/b": {"disabled_variant": "x", "ghost": "@g:s", "embedding_model": "my model"}}',
                "embedding_model",
            ),
        ],
    )
    def test_invalid_values_name_the_key(self, monkeypatch, env, value, key):
        """A bad value fails with a message naming the configuration key."""
        monkeypatch.setenv(env, value)
        with pytest.raises(SettingsError) as err:
            load_settings()
        assert key in str(err.value)

    def test_unknown_yaml_key_is_refused(self, tmp_path, monkeypatch):
        """A typo in the YAML file is an error, not silently ignored."""
        cfg = tmp_path / "c.yaml"
        cfg.write_text("upstream:\n  controler_url: http://typo\n")
        monkeypatch.setenv("MEMGOV_CONFIG", str(cfg))
        with pytest.raises(SettingsError, match="upstream.controler_url"):
            load_settings()

    @pytest.mark.parametrize("content", [b"changeme", b"q7Zx", b"  \n"])
    def test_placeholder_secrets_are_refused_without_echoing_them(self, tmp_path, content):
        """Short or placeholder secret files are refused; the message names the key, not the value."""
        path = tmp_path / "k"
        path.write_bytes(content)
        with pytest.raises(SecretError) as err:
            read_secret(path, "secrets.session_key_file")
        assert "secrets.session_key_file" in str(err.value)
        assert content.strip().decode() not in str(err.value) or not content.strip()

    @pytest.mark.parametrize("key", [b"sk-with a-space-inside-it", "sk-\u00e9t\u00e9-not-ascii-key".encode()])
    def test_an_embedding_key_that_cannot_be_a_bearer_token_is_refused(self, tmp_path, key):
        """memgov's own provider key goes into an Authorization header: printable ASCII only, never echoed."""
        path = tmp_path / "provider.key"
        path.write_bytes(key)
        settings = load_settings(upstream={"embedding_api_key_file": str(path)})
        with pytest.raises(SettingsError) as err:
            settings.embedding_api_key()
        assert "upstream.embedding_api_key_file" in str(err.value) and "sk-" not in str(err.value)

    def test_production_requires_a_session_key_file(self, monkeypatch):
        """The production profile refuses to generate a session key."""
        monkeypatch.setenv("MEMGOV_PROFILE", "production")
        with pytest.raises(SettingsError, match="session_key_file"):
            load_settings()

    def test_dev_session_key_is_generated_once(self, tmp_path, monkeypatch):
        """In dev, a missing session key is generated under ./.memgov and reused."""
        monkeypatch.chdir(tmp_path)
        s = load_settings()
        first = s.session_keys()[0]
        assert first == load_settings().session_keys()[0] and len(first) >= 32
        assert (tmp_path / ".memgov" / "session.key").stat().st_mode & 0o077 == 0


class TestIdentitySettings:
    @pytest.mark.parametrize(
        ("env", "value", "key"),
        [
            ("MEMGOV_MATRIX__SERVER_NAME", "not a host", "matrix.server_name"),
            ("MEMGOV_MATRIX__BRIDGE_BOT", "bridge", "matrix.bridge_bot"),
            ("MEMGOV_AGENTS", '{"kagent/a": {"disabled_variant": "a-nomem", "ghost": "a@example.org"}}', "ghost"),
            (
                "MEMGOV_AGENTS",
                '{"kagent/a": {"disabled_variant": "A_NoMem", "ghost": "@a:example.org"}}',
                "disabled_variant",
            ),
        ],
    )
    def test_matrix_identities_are_validated_at_load(self, monkeypatch, env, value, key):
        """Server names, the bridge bot and agent ghosts must follow the Matrix grammar."""
        monkeypatch.setenv(env, value)
        with pytest.raises(SettingsError, match=key):
            load_settings()

    def test_server_name_is_canonicalised(self, monkeypatch):
        """Host names are compared in lower case, so the setting is stored that way."""
        monkeypatch.setenv("MEMGOV_MATRIX__SERVER_NAME", "Example.ORG")
        assert load_settings().matrix.server_name == "example.org"
