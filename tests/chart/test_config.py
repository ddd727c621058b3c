"""The rendered config file, the container command, the mounts behind them, and the kagent wiring per mode."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from sidecar.cli import build_parser
from sidecar.policy.opa_server import RUN_FLAGS
from sidecar.settings import PACKAGED_POLICY_DIR, Settings, load_settings
from tests.chart import cases
from tests.chart.helm import RELEASE, config_file, find, kagent_files, pod_spec, render, render_error

MATRIX = list(cases.MATRIX.items())
IDS = list(cases.MATRIX)


@pytest.fixture
def load(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Load a rendered config file through memgov's own settings loader, with no MEMGOV_* leaking in."""

    def _load(config: dict[str, Any]) -> Settings:
        for key in list(os.environ):
            if key.startswith("MEMGOV_"):
                monkeypatch.delenv(key)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        monkeypatch.setenv("MEMGOV_CONFIG", str(path))
        return load_settings()

    return _load


def _mounted_files(values: dict[str, Any]) -> dict[str, str]:
    """Map every file path the memgov container sees through a projected volume to its source key."""
    spec = pod_spec(render(values))
    volumes = {v["name"]: v for v in spec["volumes"]}
    files: dict[str, str] = {}
    for mount in spec["containers"][0]["volumeMounts"]:
        for source in volumes[mount["name"]].get("projected", {}).get("sources", []):
            ref = source.get("secret") or source.get("configMap")
            for item in ref["items"]:
                files[str(PurePosixPath(mount["mountPath"]) / item["path"])] = f"{ref['name']}/{item['key']}"
    return files


class TestConfigFile:
    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_memgov_accepts_the_rendered_config(self, name: str, values: dict[str, Any], load: Any) -> None:
        """memgov's settings loader (unknown keys refused) accepts every rendered config as a production config."""
        settings = load(config_file(render(values)))
        assert settings.profile == "production"
        assert settings.listen.address("data") == ("0.0.0.0", 8080)

    @pytest.mark.parametrize(
        ("values", "pack"),
        [
            (cases.GATEWAY_DEFAULT, "image"),
            ({"policy": {"pack": {"files": {"data/limits.yaml": "max_days: 3\n"}}}}, "/etc/memgov/policies"),
            (cases.GATEWAY_PRODUCTION, "/var/run/memgov/opa/pack"),
            (cases.SIDECAR, "/var/run/memgov/opa/pack"),
        ],
        ids=["image-pack", "own-pack", "opa-bundle", "sidecar-opa-bundle"],
    )
    def test_memgov_loads_the_pack_the_pod_holds(self, values: dict[str, Any], pack: str, load: Any) -> None:
        """memgov loads its image's pack by default, the operator's mounted pack, or with OPA the shared bundle."""
        settings = load(config_file(render(values)))
        assert settings.policy.dir == (PACKAGED_POLICY_DIR if pack == "image" else PurePosixPath(pack))

    @pytest.mark.parametrize("workers", [1, 3])
    def test_the_worker_count_reaches_the_settings(self, workers: int, load: Any) -> None:
        """`workers` in the values is the number of gateway processes memgov serve starts in each pod."""
        assert load(config_file(render({"workers": workers}))).listen.workers == workers

    def test_production_values_reach_the_settings(self, load: Any) -> None:
        """Engine, upstreams, Matrix facts, agents and the erasure adapter arrive under memgov's own key names."""
        settings = load(config_file(render(cases.GATEWAY_PRODUCTION)))
        assert settings.policy.engine == "shadow"
        assert settings.policy.opa_url == "http://127.0.0.1:8181"
        assert settings.upstream.controller_url == "http://kagent-controller.kagent.svc:8083"
        assert settings.upstream.embedding_url == "https://embeddings.example.org/v1"
        assert settings.matrix.server_name == "example.org"
        assert settings.agents["kagent/helper"].disabled_variant == "helper-nomem"
        assert settings.erasure.adapter == "kagent-db"
        assert settings.agents["kagent/helper"].embedding_model == "text-embedding-3-small"
        assert settings.upstream.embedding_api_key_file is not None
        assert settings.state.url_file is not None
        assert settings.tracing.enabled and settings.tracing.endpoint.endswith(":4318/v1/traces")

    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_every_file_setting_points_at_a_mounted_secret(self, name: str, values: dict[str, Any]) -> None:
        """Each *_file key in the config names a file the pod actually mounts from a Secret."""
        config = config_file(render(values))
        mounted = _mounted_files(values)
        named = [
            path
            for section in config.values()
            if isinstance(section, dict)
            for key, path in section.items()
            if key.endswith("_file")
        ]
        assert named
        assert all(path in mounted for path in named)

    def test_secret_files_come_from_the_named_secrets(self) -> None:
        """Session, rotation, bridge, operator, state and kagent-db keys are read from the Secrets the values name."""
        mounted = _mounted_files(cases.GATEWAY_PRODUCTION)
        secrets = {path.rsplit("/", 1)[1]: src for path, src in mounted.items() if path.startswith("/var/run/")}
        assert secrets == {
            "session.key": f"{RELEASE}-session-key/session-key",
            "previous-session.key": "memgov-session-key-old/session-key",
            "bridge.key": "memgov-bridge/bridge-key",
            "operator.key": "memgov-operator/operator-key",
            "state-url": "memgov-state/url",
            "kagent-db-url": "memgov-kagent-db/url",
            "embedding-api.key": "memgov-embedding/api-key",
        }

    def test_a_next_session_key_is_mounted_and_accepted(self, load: Any) -> None:
        """secrets.nextSessionKey (rotation step 1) is mounted from its Secret and named as the key only accepted."""
        values = {"secrets": {"nextSessionKey": {"existingSecret": "memgov-session-key-new"}}}
        mounted = _mounted_files(values)
        config = config_file(render(values))
        path = config["secrets"]["next_session_key_file"]
        assert path.endswith("/next-session.key") and mounted[path] == "memgov-session-key-new/session-key"
        assert load(config).secrets.next_session_key_file is not None

    @pytest.mark.parametrize("values", [cases.GATEWAY_DEFAULT, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_key_folders_mount_whole_secrets_and_name_the_folders(self, values: dict[str, Any], load: Any) -> None:
        """trust.bridgeKeys and trust.operatorKeys mount their Secrets whole (each data key a key id's file, and
        the Secret's edits followed, which a projected item list would not) and name the folders; no key file."""
        folders = {
            "bridgeKeys": {"existingSecret": "memgov-bridge-keys"},
            "operatorKeys": {"existingSecret": "op-keys"},
        }
        manifests = render({**values, "trust": folders})
        spec, config = pod_spec(manifests), config_file(manifests)
        memgov = next(c for c in spec["containers"] if c["name"] == "memgov")
        mounts = {m["mountPath"]: m for m in memgov["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for purpose, secret in (("bridge", "memgov-bridge-keys"), ("operator", "op-keys")):
            mount = mounts[config["trust"][f"{purpose}_keys_dir"]]
            assert mount["readOnly"] is True and mount["name"].startswith("memgov-")
            assert volumes[mount["name"]] == {
                "name": mount["name"],
                "secret": {"secretName": secret, "defaultMode": 0o440},
            }
            assert f"{purpose}_key_file" not in config["trust"]
        settings = load(config)
        assert settings.trust.bridge_keys_dir is not None and settings.trust.operator_keys_dir is not None
        assert {"memgov-bridge-keys", "op-keys"} <= set(config["boundary"]["secrets"])

    @pytest.mark.parametrize("purpose", ["bridge", "operator"])
    def test_a_key_file_and_a_key_folder_of_one_purpose_are_refused(self, purpose: str) -> None:
        """memgov reads one key file or one key folder per purpose; the render says which to keep."""
        trust = {f"{purpose}Key": {"existingSecret": "one"}, f"{purpose}Keys": {"existingSecret": "many"}}
        message = render_error({"trust": trust})
        assert f"trust.{purpose}Key and trust.{purpose}Keys both name a Secret" in message
        assert f"Keep trust.{purpose}Keys (it rotates)" in message

    @pytest.mark.parametrize("rotate", [True, False])
    def test_rotation_settings_reach_memgov(self, rotate: bool, load: Any) -> None:
        """erasure.rotate arrives as is (on by default); the re-embedding key is mounted only with a provider."""
        values = {
            "upstream": {
                "embeddingUrl": "https://embeddings.example.org/v1",
                "embeddingApiKey": {"existingSecret": "memgov-embedding", "key": "k"},
            },
            "erasure": {"rotate": rotate},
            "networkPolicy": {"enabled": False},
        }
        settings = load(config_file(render(values)))
        assert settings.erasure.rotate is rotate
        assert settings.upstream.embedding_api_key_file is not None
        assert _mounted_files(values)[str(settings.upstream.embedding_api_key_file)] == "memgov-embedding/k"
        assert load(config_file(render({}))).erasure.rotate is True
        no_provider = {
            "upstream": {"embeddingApiKey": {"existingSecret": "memgov-embedding"}},
            "networkPolicy": {"enabled": False},
        }
        assert load(config_file(render(no_provider))).upstream.embedding_api_key_file is None

    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_container_command_is_one_memgov_understands(self, name: str, values: dict[str, Any]) -> None:
        """The container command parses with memgov's CLI as `serve` with the mounted config file."""
        command = pod_spec(render(values))["containers"][0]["command"]
        assert command[0] == "memgov"
        args = build_parser().parse_args(command[1:])
        assert (args.command, args.config) == ("serve", "/etc/memgov/config.yaml")
        assert args.config in _mounted_files(values)

    @pytest.mark.parametrize(
        ("values", "state"),
        [(cases.GATEWAY_DEFAULT, "sqlite"), (cases.GATEWAY_PRODUCTION, "postgresql")],
        ids=["sqlite", "postgresql"],
    )
    def test_sqlite_state_gets_a_writable_volume(self, values: dict[str, Any], state: str) -> None:
        """SQLite state lives on a writable volume; PostgreSQL state needs none."""
        config = config_file(render(values))
        mounts = {m["mountPath"] for m in pod_spec(render(values))["containers"][0]["volumeMounts"]}
        if state == "sqlite":
            assert config["state"]["url"] == "sqlite:////var/lib/memgov/state.db"
            assert "/var/lib/memgov" in mounts
        else:
            # The hook Job migrates PostgreSQL before install and upgrade; serve only checks the schema.
            assert config["state"] == {"url_file": "/var/run/memgov/secrets/state-url", "auto_migrate": False}
            assert "/var/lib/memgov" not in mounts


class TestKagentWiring:
    def test_gateway_points_kagent_controller_name_at_the_service(self) -> None:
        """Gateway mode tells kagent to set KAGENT_CONTROLLER_NAME to memgov's Service, which serves 8083."""
        manifests = render(cases.GATEWAY_DEFAULT)
        env = kagent_files(manifests)["kagent-values.yaml"]["controller"]["env"]
        service = find(manifests, "Service", RELEASE)
        assert env == [{"name": "KAGENT_CONTROLLER_NAME", "value": service["metadata"]["name"]}]
        assert 8083 in {p["port"] for p in service["spec"]["ports"]}

    def test_sidecar_moves_the_controller_to_loopback_behind_memgov(self) -> None:
        """Sidecar mode binds the controller to loopback, memgov forwards there, and kagent's Service targets memgov."""
        manifests = render(cases.SIDECAR)
        controller = kagent_files(manifests)["kagent-values.yaml"]["controller"]
        data_port = int(config_file(manifests)["listen"]["data"].rsplit(":", 1)[1])
        assert controller["env"] == [{"name": "HTTP_SERVER_ADDRESS", "value": "127.0.0.1:8083"}]
        assert controller["service"]["ports"] == {"port": 8083, "targetPort": data_port}
        assert config_file(manifests)["upstream"]["controller_url"] == "http://127.0.0.1:8083"
        # The kubelet cannot reach loopback, so kagent's probes move to the manager's health port.
        assert controller["readinessProbe"]["httpGet"]["port"] == 8082

    def test_sidecar_patch_lets_memgov_read_its_secrets(self) -> None:
        """The controller-pod patch sets the fsGroup that makes memgov's 0440 secret files readable to it."""
        spec = pod_spec(render(cases.SIDECAR))
        secrets = next(v for v in spec["volumes"] if v["name"] == "memgov-secrets")
        assert secrets["projected"]["defaultMode"] == 0o440
        assert spec["securityContext"]["fsGroup"] == spec["containers"][0]["securityContext"]["runAsGroup"]

    def test_sidecar_volumes_do_not_collide_with_the_controllers(self) -> None:
        """Every volume the patch adds is memgov-prefixed, so it cannot replace one of kagent's."""
        assert all(v["name"].startswith("memgov-") for v in pod_spec(render(cases.SIDECAR))["volumes"])


class TestOpaWiring:
    @pytest.mark.parametrize("values", [cases.GATEWAY_PRODUCTION, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_in_pod_opa_loads_the_bundle_memgov_loads(self, values: dict[str, Any]) -> None:
        """The init container writes the bundle; OPA serves it on loopback and memgov reads the same folder."""
        manifests = render(values)
        spec = pod_spec(manifests)
        (init,) = spec["initContainers"]
        memgov, opa = spec["containers"]
        bundle = "/var/run/memgov/opa/pack"
        assert init["command"] == ["memgov", "policy", "bundle", "--out", bundle]
        assert opa["args"][:2] == ["run", "--server"] and opa["args"][-2:] == ["--bundle", bundle]
        assert "--addr=127.0.0.1:8181" in opa["args"]
        policy = config_file(manifests)["policy"]
        assert (policy["dir"], policy["opa_url"]) == (bundle, "http://127.0.0.1:8181")

        def mounts(container: dict[str, Any]) -> dict[str, tuple[str, bool]]:
            return {m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in container["volumeMounts"]}

        assert mounts(init)["memgov-opa"] == ("/var/run/memgov/opa", False)
        assert mounts(opa)["memgov-opa"] == mounts(memgov)["memgov-opa"] == ("/var/run/memgov/opa", True)
        assert set(mounts(opa)) == {"memgov-opa", "memgov-no-token"}

    def test_opa_loads_bundles_as_memgov_starts_them(self) -> None:
        """The chart's OPA flags are the ones memgov's own OPA launcher uses (tests, policy test, bench)."""
        args = pod_spec(render(cases.SIDECAR))["containers"][1]["args"]
        assert [a for a in args if a in RUN_FLAGS] == list(RUN_FLAGS)

    def test_own_pack_is_bundled_from_the_config_map(self) -> None:
        """With an operator pack, the init container bundles the mounted ConfigMap, not the image's pack."""
        values = {
            **cases.SIDECAR,
            "policy": {
                **cases.SIDECAR["policy"],
                "pack": {
                    "files": {
                        "data/limits.yaml": "max_days: 3\n",
                        "rego/memgov/decision/a.rego": "package memgov.decision\n",
                    }
                },
            },
        }
        (init,) = pod_spec(render(values))["initContainers"]
        assert init["command"][-2:] == ["--dir", "/etc/memgov/policies"]
        assert {"name": "memgov-config", "mountPath": "/etc/memgov", "readOnly": True} in init["volumeMounts"]

    def test_external_opa_is_used_as_configured(self) -> None:
        """With policy.opa.url the config names that server and no OPA or init container is added."""
        manifests = render(cases.GATEWAY_EXTERNAL_OPA)
        assert config_file(manifests)["policy"]["opa_url"] == "http://opa.opa.svc:8181"
        assert [c["name"] for c in pod_spec(manifests)["containers"]] == ["memgov"]
        assert "initContainers" not in pod_spec(manifests)
