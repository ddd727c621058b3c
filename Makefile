# memgov — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TOOLS := .tools/bin
export PATH := $(CURDIR)/$(TOOLS):$(PATH)

# Pinned Go-built tools; built once per version into $(MEMGOV_TOOLS_CACHE) (default ~/.cache/memgov-tools).
OPA_VERSION := v1.22.3
REGAL_VERSION := v0.39.0
HELM_VERSION := v3.22.0
# cyclonus evaluates NetworkPolicies offline: the connectivity model and `memgov doctor` (docs/boundary.md).
CYCLONUS_VERSION := v0.5.6
# Prometheus 3.16.0 (its Go module versions are v0.3xx). scripts/rulecheck/go.mod pins the same.
PROMETHEUS_VERSION := v0.316.0
RULECHECK := scripts/rulecheck
# The real API server the chart tests install into (tests/support/kube.py): k8s.io/kubernetes at this
# version, its staging modules at the matching v0.x (scripts/kube-apiserver/go.mod pins both). It
# reports this version, as helm refuses a server that says v0.0.0-master.
KUBE_VERSION := v1.36.3
KUBE_APISERVER := scripts/kube-apiserver
# The ServiceMonitor and PrometheusRule CRDs the chart is installed against (from this Go module).
PROMETHEUS_OPERATOR_VERSION := v0.85.0
# The CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy CRDs the admission guards are tested
# against (github.com/cilium/cilium at this version, a 38 MB module download, once).
CILIUM_VERSION := v1.20.2
KUBE_LDFLAGS := $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(p).gitVersion=$(KUBE_VERSION) -X $(p).gitMajor=$(word 1,$(subst ., ,$(KUBE_VERSION:v%=%))) \
	-X $(p).gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION:v%=%))) -X $(p).gitTreeState=clean \
	-X $(p).buildDate=1970-01-01T00:00:00Z)

# The kagent releases the conformance part builds and tests (conformance/kagent/build.sh, docs/conformance.md).
KAGENT_RELEASES := 0.9 0.10
KAGENT_TARGETS := $(foreach r,$(KAGENT_RELEASES),kagent-$(r))

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= memgov:$(VERSION)
# docker, podman or buildah: all three build the Containerfile with the same command line.
CONTAINER_TOOL ?= $(firstword $(foreach t,docker podman buildah,$(shell command -v $(t))))
# The image CI builds from the same Containerfile on stand-in bases (scripts/image-ci.sh).
IMAGE_CI := .tools/image/memgov-ci.tar

.PHONY: prereqs builds $(TOOL_TARGETS) check test-fast venv tools promtool check-rules-promtool pg kagent $(KAGENT_TARGETS) conformance image image-tools image-ci test test-py test-rego lint \
	demo bench fuzz clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# The pinned Go tools above, and memgov-symcc, the symbolic checker of `memgov policy prove` (tools/symcc/,
# built by cargo and cached the same way; its solver, cvc5, comes from PyPI with the test extra). One
# target per tool, so `make -j` builds them side by side (the longest first).
TOOL_TARGETS := tool-kube-apiserver tool-symcc tool-kubectl tool-opa tool-regal tool-helm tool-cyclonus tool-rulecheck tool-crds
tools: $(TOOL_TARGETS)

tool-opa:
	scripts/go-tool.sh opa github.com/open-policy-agent/opa $(OPA_VERSION) github.com/open-policy-agent/opa
tool-regal:
	scripts/go-tool.sh regal github.com/open-policy-agent/regal $(REGAL_VERSION) github.com/open-policy-agent/regal
tool-helm:
	scripts/go-tool.sh helm helm.sh/helm/v3 $(HELM_VERSION) helm.sh/helm/v3/cmd/helm
tool-cyclonus:
	scripts/go-tool.sh cyclonus github.com/mattfenwick/cyclonus $(CYCLONUS_VERSION) github.com/mattfenwick/cyclonus/cmd/cyclonus
tool-rulecheck:
	scripts/go-tool.sh rulecheck ./$(RULECHECK) $$(cat $(RULECHECK)/go.mod $(RULECHECK)/go.sum $(RULECHECK)/*.go | sha256sum | cut -c1-16) .
tool-kube-apiserver:
	GO_TOOL_LDFLAGS='-s -w $(KUBE_LDFLAGS)' scripts/go-tool.sh kube-apiserver ./$(KUBE_APISERVER) \
	  $(KUBE_VERSION)-$$(cat $(KUBE_APISERVER)/go.mod $(KUBE_APISERVER)/go.sum $(KUBE_APISERVER)/main.go | sha256sum | cut -c1-12) .
# kubectl at the API server's version: the runbook's kubectl commands run against it (tests/chart).
KUBECTL := scripts/kubectl
tool-kubectl:
	GO_TOOL_LDFLAGS='-s -w $(KUBE_LDFLAGS)' scripts/go-tool.sh kubectl ./$(KUBECTL) \
	  $(KUBE_VERSION)-$$(cat $(KUBECTL)/go.mod $(KUBECTL)/go.sum $(KUBECTL)/main.go | sha256sum | cut -c1-12) .
tool-symcc:
	scripts/rust-tool.sh memgov-symcc tools/symcc
tool-crds:
	scripts/crds.sh prometheus-operator github.com/prometheus-operator/prometheus-operator $(PROMETHEUS_OPERATOR_VERSION) \
	  example/prometheus-operator-crd monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml
	scripts/crds.sh cilium github.com/cilium/cilium $(CILIUM_VERSION) \
	  pkg/k8s/apis/cilium.io/client/crds/v2 ciliumnetworkpolicies.yaml ciliumclusterwidenetworkpolicies.yaml

# The full promtool (not part of `make test`: a cold build takes 5-6 minutes and over 1 GB of
# modules; rulecheck runs the same rule parser, and Prometheus's rule manager and PromQL engine for
# the alerts' unit tests). `make check-rules-promtool` uses it: `promtool check rules` on the
# rendered rules and `promtool test rules` on tests/chart/alerts.test.yaml, the file rulecheck runs.
promtool:
	GO_TOOL_TAGS=remove_all_sd scripts/go-tool.sh promtool github.com/prometheus/prometheus $(PROMETHEUS_VERSION) github.com/prometheus/prometheus/cmd/promtool

check-rules-promtool: venv tools promtool
	mkdir -p .tools/alert-tests
	helm template memgov charts/memgov -n kagent --kube-version 1.33.0 --set prometheusRule.enabled=true \
	  --set prometheusRule.runbookUrl=https://docs.example.org/memgov/runbook.md --set state.ephemeral=true \
	  --show-only templates/prometheusrule.yaml \
	  | $(PY) -c 'import sys, yaml; print(yaml.safe_dump({"groups": yaml.safe_load(sys.stdin)["spec"]["groups"]}))' \
	  > .tools/memgov-rules.yaml
	promtool check rules .tools/memgov-rules.yaml
	$(PY) -c 'import sys, yaml; g = yaml.safe_load(open(sys.argv[1]))["groups"]; [r.pop("annotations") for x in g for r in x["rules"]]; print(yaml.safe_dump({"groups": g}))' \
	  .tools/memgov-rules.yaml > .tools/alert-tests/memgov-rules.yaml
	cp tests/chart/alerts.test.yaml .tools/alert-tests/
	promtool test rules .tools/alert-tests/alerts.test.yaml

# Every system prerequisite of `make test` (PostgreSQL server and headers, a C compiler, Go, buildah,
# mmdebstrap, ...), each detected by the file that is used and installed with apt when missing.
prereqs:
	scripts/prereqs.sh

# The tests start their own PostgreSQL cluster; this only makes sure the server binaries exist.
pg:
	scripts/prereqs.sh initdb

# For each supported kagent release (v0.9.11, v0.10.0-rc3): its own controller server and Go runtime
# driver, and a venv with its Python runtime (kagent-adk 0.9.11, 0.10.4); pgvector for the local
# PostgreSQL. Built once from ../shared/vendor, the Go module proxy and PyPI, cached in
# ~/.cache/memgov-conformance by input hash (conformance/kagent/build.sh). One target per release,
# so `make -j` builds them side by side.
kagent: $(KAGENT_TARGETS)

$(KAGENT_TARGETS): pg
	scripts/prereqs.sh go cc make flock postgres.h
	conformance/kagent/build.sh release $(@:kagent-%=%) >/dev/null

# Only the conformance part: every test that runs kagent itself (either release) or kagent's own runtime code.
conformance: venv kagent
	$(VENV)/bin/pytest -q -p no:cacheprovider -m real_kagent

# Regal v0.39.0 is built with OPA 1.14 and cannot be rebuilt on the pinned OPA 1.22.3 (their gobwas/glob
# versions are incompatible); the pinned opa is the compiler of record, Regal only lints.
test-rego: tools
	opa fmt --list --fail policies/rego
	opa check --strict --schema docs/schema/decision-input.typecheck.schema.json policies/rego
	opa test policies/rego
	regal lint --config-file .regal/config.yaml policies/rego

# memgov's container image, for your registry (docs/deploy.md). Bases are pinned by digest in the Containerfile.
image:
	@test -n "$(CONTAINER_TOOL)" || { echo "make image needs docker, podman or buildah" >&2; exit 1; }
	$(CONTAINER_TOOL) build -f Containerfile -t $(IMAGE) .

image-tools:
	scripts/prereqs.sh buildah mmdebstrap

image-ci: image-tools
	scripts/image-ci.sh $(IMAGE_CI)

# The suite runs on PYTEST_WORKERS parallel workers (pytest-xdist): most tests wait on processes
# (PostgreSQL, kagent, OPA, gateways), so more workers than cores pays. A build several tests share
# (the wheel, the bench run) runs once for all workers (tests/support/once.py). Idle workers take
# tests queued on busy ones (worksteal), so one long test does not leave a tail.
PYTEST_WORKERS ?= 4
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal

test-py: venv pg tools kagent image-ci
	$(PYTEST) --durations=25

# The inner loop (about 3 minutes): lint, types, import contracts, and every test not marked slow
# (tests/conftest.py says which are: real kagent, gateway processes, image, wheel, long runs). The
# checks run beside the tests, not before them.
check: venv tools
	$(MAKE) -j3 lint test-rego test-fast

test-fast: venv
	$(PYTEST) -m "not slow and not real_kagent"

# Style, types and layers: ruff lint and format (pyproject [tool.ruff]), mypy --strict (sidecar/ and tests/policy/), the import
# contracts of pyproject [tool.importlinter] (the layers of docs/architecture.md), and no declared dependency
# that nothing imports (scripts/unused_deps.py).
# mypy's cache lives beside the other build caches, so a fresh clone re-checks only what changed
# (mypy compares each file's hash when its mtime differs from the cache's).
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/memgov-mypy
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)
	$(VENV)/bin/lint-imports
	$(PY) scripts/unused_deps.py pyproject.toml

# Everything the tests need, built side by side: on a cold machine the builds download and link
# while others compile. Warm, each is a cache lookup. Output is not synchronised, so progress
# (each build's "building …" line, pytest's dots) shows as it happens, interleaved.
BUILD_JOBS ?= 4
builds: tool-kube-apiserver tool-symcc kagent venv tools image-ci

test: prereqs
	$(MAKE) -j$(BUILD_JOBS) builds
	$(MAKE) -j3 lint test-rego test-py

demo: venv
	$(VENV)/bin/memgov demo

bench: venv pg kagent
	$(VENV)/bin/memgov bench proxy

# The long fuzz run (make test runs a bounded sample); override FUZZ_CASES / FUZZ_SEED.
FUZZ_CASES ?= 100000
FUZZ_SEED ?= 1
fuzz: venv
	$(VENV)/bin/memgov fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

clean:
	rm -rf $(VENV) .tools .memgov
