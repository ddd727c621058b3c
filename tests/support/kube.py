"""A real Kubernetes API server for the chart's tests: etcd and kube-apiserver, and nothing else.

There is no kubelet, no scheduler and no controller manager, so nothing runs: what the tests get is
the API server's own work on every object - schema validation, defaulting, admission (PodSecurity,
ValidatingAdmissionPolicy, ServiceAccount, ...) and storage - which is what a chart install meets
first. A pod is checked by creating it with a server-side dry run; Deployments and Jobs are stored
but never start pods. The two controllers' jobs a test needs (a namespace's default ServiceAccount,
a hook Job finishing) are done by the test, visibly, through the API. Calls are made with an
admin certificate (group system:masters), or as another user through impersonation (``as_user``),
whom RBAC then judges: the server's bootstrap roles, the controllers' included, are in place.

kube-apiserver is built by `make tools` (scripts/kube-apiserver, pinned in the Makefile) and etcd
comes from the distribution (scripts/prereqs.sh etcd). Each xdist worker starts its own pair on
ports from its own slice (free_port); the start takes a few seconds.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sidecar.policy.opa_server import stop_child
from tests.support.pg import free_port

REPO = Path(__file__).resolve().parents[2]
KUBE_APISERVER = REPO / ".tools" / "bin" / "kube-apiserver"
HELM = REPO / ".tools" / "bin" / "helm"
START_TIMEOUT_S = 120.0

Obj = dict[str, Any]


class KubeMissing(Exception):
    """A binary the server needs is not installed (`make tools`, `scripts/prereqs.sh etcd`)."""


@dataclass
class Reply:
    """One API answer: HTTP status, parsed body and the Warning headers (PodSecurity warns there)."""

    status: int
    body: Obj
    warnings: list[str] = field(default_factory=list)

    def ok(self) -> Obj:
        assert 200 <= self.status < 300, f"HTTP {self.status}: {self.body.get('message', self.body)}"
        return self.body


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None = None,
    *,
    sans: list[x509.GeneralName] | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = issuer if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write_pki(folder: Path) -> None:
    """CA, serving cert, an admin client cert (group system:masters) and the ServiceAccount keys."""
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memgov-test-ca")])
    ca = _cert(ca_name, ca_key)
    server_key = _key()
    server = _cert(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        server_key,
        (ca_name, ca_key),
        sans=[
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        ],
        usage=x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
    )
    admin_key = _key()
    admin = _cert(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "memgov-test-admin"),
            ]
        ),
        admin_key,
        (ca_name, ca_key),
        usage=x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = _key()
    pem = serialization.Encoding.PEM
    files = {
        "ca.crt": ca.public_bytes(pem),
        "server.crt": server.public_bytes(pem),
        "server.key": _pem_key(server_key),
        "admin.crt": admin.public_bytes(pem),
        "admin.key": _pem_key(admin_key),
        "sa.key": _pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o600)


@dataclass
class KubeApi:
    """A running API server: its URL, an admin kubeconfig, and calls made with the admin cert."""

    url: str
    folder: Path
    kubeconfig: Path
    context: ssl.SSLContext

    def request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        dry_run: bool = False,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        as_user: str | None = None,
    ) -> Reply:
        params = dict(query or {})
        if dry_run:
            params["dryRun"] = "All"
        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if as_user is not None:
            # The admin (system:masters) may impersonate anyone; a service account's groups are added by the server.
            req.add_header("Impersonate-User", as_user)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=30) as resp:
                status, raw, headers = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as err:
            status, raw, headers = err.code, err.read(), err.headers
        parsed = json.loads(raw) if raw else {}
        return Reply(status, parsed, list(headers.get_all("Warning") or []))

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def create(
        self, obj: Obj, *, dry_run: bool = False, namespace: str | None = None, as_user: str | None = None
    ) -> Reply:
        """POST an object to its collection (namespace from the object unless given)."""
        return self.request("POST", collection(obj, namespace), obj, dry_run=dry_run, as_user=as_user)

    def apply(
        self, obj: Obj, *, dry_run: bool = False, namespace: str | None = None, as_user: str | None = None
    ) -> Reply:
        """Server-side apply (field manager memgov-tests, conflicts forced)."""
        path = f"{collection(obj, namespace)}/{obj['metadata']['name']}"
        query = {"fieldManager": "memgov-tests", "force": "true"}
        return self.request(
            "PATCH",
            path,
            obj,
            dry_run=dry_run,
            query=query,
            content_type="application/apply-patch+yaml",
            as_user=as_user,
        )

    def delete(self, obj: Obj, *, dry_run: bool = False, as_user: str | None = None) -> Reply:
        """DELETE an object (namespace from the object)."""
        path = f"{collection(obj)}/{obj['metadata']['name']}"
        return self.request("DELETE", path, dry_run=dry_run, as_user=as_user)

    def allowed(self, user: str, attributes: Obj) -> bool:
        """Whether RBAC lets user do what the resourceAttributes describe (a SubjectAccessReview)."""
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": attributes},
        }
        return bool(self.create(review).ok()["status"].get("allowed"))

    def install_crds(self, folder: Path) -> None:
        """Create every CRD in folder (one per YAML file; already there is fine) and wait until each is served."""
        for path in sorted(folder.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            reply = self.create(crd)
            assert reply.status in (201, 409), reply.body.get("message")
            name = crd["metadata"]["name"]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                stored = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").ok()
                conditions = (stored.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"CRD {name} not established")

    def create_namespace(self, name: str, *, pod_security: str | None = "restricted") -> None:
        """A namespace, enforcing (and warning on) a Pod Security Standard level, with its default
        ServiceAccount (the controller manager would create it; the ServiceAccount admission plugin
        refuses pods without it)."""
        labels = {"kubernetes.io/metadata.name": name}
        if pod_security:
            for mode in ("enforce", "warn", "audit"):
                labels[f"pod-security.kubernetes.io/{mode}"] = pod_security
                labels[f"pod-security.kubernetes.io/{mode}-version"] = "latest"
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}).ok()
        self.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
        ).ok()

    def env(self) -> dict[str, str]:
        """The environment of a client of this server: its kubeconfig, helm's caches in the server's folder,
        and the pinned tools (helm) first on PATH."""
        return {
            **os.environ,
            "PATH": f"{HELM.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.folder / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.folder / "helm" / "config"),
            "HELM_DATA_HOME": str(self.folder / "helm" / "data"),
        }

    def helm(self, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
        """Run the pinned helm against this server (helm's caches kept in the server's folder)."""
        return subprocess.run(
            [str(HELM), *args], capture_output=True, text=True, timeout=timeout, check=False, env=self.env()
        )

    def shell(
        self, command: str, *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 180.0
    ) -> subprocess.CompletedProcess[str]:
        """Run one command line as an operator types it (bash), against this server."""
        return subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**self.env(), **(env or {})},
            cwd=cwd,
        )


#: The resource (plural) of each kind the tests send; core kinds live under /api/v1.
PLURALS = {
    "Namespace": "namespaces",
    "Pod": "pods",
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "Job": "jobs",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "NetworkPolicy": "networkpolicies",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "CustomResourceDefinition": "customresourcedefinitions",
    "ServiceMonitor": "servicemonitors",
    "PrometheusRule": "prometheusrules",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "SubjectAccessReview": "subjectaccessreviews",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "CiliumNetworkPolicy": "ciliumnetworkpolicies",
    "CiliumClusterwideNetworkPolicy": "ciliumclusterwidenetworkpolicies",
}
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "SubjectAccessReview",
    "ClusterRole",
    "ClusterRoleBinding",
    "CiliumClusterwideNetworkPolicy",
}


def collection(obj: Obj, namespace: str | None = None) -> str:
    """The collection path an object is created in."""
    kind, version = obj["kind"], obj["apiVersion"]
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    if kind in CLUSTER_SCOPED:
        return f"{prefix}/{PLURALS[kind]}"
    ns = namespace or obj["metadata"].get("namespace") or "default"
    return f"{prefix}/namespaces/{ns}/{PLURALS[kind]}"


def pod_from(template_owner: Obj, namespace: str) -> Obj:
    """The Pod a Deployment's or Job's controller would create from its template."""
    template = template_owner["spec"]["template"]
    metadata = dict(template.get("metadata") or {})
    metadata["name"] = f"{template_owner['metadata']['name']}-probe"
    metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def _wait(what: str, check: Any, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if check():
            return
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not become ready in {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}")


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def kube_api(folder: Path) -> Iterator[KubeApi]:
    """Start etcd and kube-apiserver in ``folder``; stop both on exit."""
    etcd = shutil.which("etcd")
    if etcd is None:
        raise KubeMissing("etcd is missing: run `scripts/prereqs.sh etcd` (Debian's etcd-server)")
    if not KUBE_APISERVER.exists():
        raise KubeMissing(f"{KUBE_APISERVER} is missing: run `make tools`")
    folder.mkdir(parents=True, exist_ok=True)
    _write_pki(folder)
    client, peer, secure = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{client}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        etcd_log = folder / "etcd.log"
        with etcd_log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        etcd,
                        "--name=memgov-test",
                        f"--data-dir={folder / 'etcd'}",
                        f"--listen-client-urls={etcd_url}",
                        f"--advertise-client-urls={etcd_url}",
                        f"--listen-peer-urls=http://127.0.0.1:{peer}",
                        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                        f"--initial-cluster=memgov-test=http://127.0.0.1:{peer}",
                        "--log-level=warn",
                        "--logger=zap",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), procs[0], etcd_log)
        api_log = folder / "kube-apiserver.log"
        with api_log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        str(KUBE_APISERVER),
                        f"--etcd-servers={etcd_url}",
                        "--bind-address=127.0.0.1",
                        "--advertise-address=127.0.0.1",
                        f"--secure-port={secure}",
                        f"--cert-dir={folder / 'certs'}",
                        f"--tls-cert-file={folder / 'server.crt'}",
                        f"--tls-private-key-file={folder / 'server.key'}",
                        f"--client-ca-file={folder / 'ca.crt'}",
                        "--service-account-issuer=https://kubernetes.default.svc",
                        f"--service-account-key-file={folder / 'sa.pub'}",
                        f"--service-account-signing-key-file={folder / 'sa.key'}",
                        "--service-cluster-ip-range=10.96.0.0/16",
                        "--authorization-mode=RBAC",
                        # As on real clusters: privileged pods are a Pod Security level, not a server ban.
                        "--allow-privileged=true",
                        "--enable-admission-plugins=PodSecurity,ValidatingAdmissionPolicy,ServiceAccount",
                        "--enable-priority-and-fairness=false",
                        "--profiling=false",
                        "--v=1",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
        context.load_cert_chain(str(folder / "admin.crt"), str(folder / "admin.key"))
        url = f"https://127.0.0.1:{secure}"
        _wait("kube-apiserver", lambda: _http_ok(f"{url}/readyz", context), procs[1], api_log)
        kubeconfig = folder / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "test", "cluster": {"server": url, "certificate-authority": str(folder / "ca.crt")}}
                    ],
                    "users": [
                        {
                            "name": "admin",
                            "user": {
                                "client-certificate": str(folder / "admin.crt"),
                                "client-key": str(folder / "admin.key"),
                            },
                        }
                    ],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
                    "current-context": "test",
                }
            )
        )
        kubeconfig.chmod(0o600)
        yield KubeApi(url, folder, kubeconfig, context)
    finally:
        for proc in reversed(procs):
            stop_child(proc, grace_s=15)
