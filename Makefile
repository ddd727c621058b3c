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

.PHONY: venv tools pg kagent conformance test test-py test-rego demo bench fuzz chart-policies clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

tools:
	scripts/go-tool.sh opa github.com/open-policy-agent/opa $(OPA_VERSION) github.com/open-policy-agent/opa
	scripts/go-tool.sh regal github.com/open-policy-agent/regal $(REGAL_VERSION) github.com/open-policy-agent/regal
	scripts/go-tool.sh helm helm.sh/helm/v3 $(HELM_VERSION) helm.sh/helm/v3/cmd/helm

# The tests start their own PostgreSQL cluster; this only makes sure the server binaries exist.
pg:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (echo "installing the PostgreSQL server" && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)

# kagent v0.9.11's own controller server and Go runtime driver, pgvector for the local PostgreSQL, and a
# venv with kagent's Python runtime: built once from ../shared/vendor and PyPI, cached in
# ~/.cache/memgov-conformance by input hash (conformance/kagent/build.sh).
kagent: pg
	@command -v go >/dev/null || { echo "go is required for the real-kagent conformance build"; exit 1; }
	conformance/kagent/build.sh all >/dev/null

# Only the conformance part: every test that runs kagent v0.9.11 itself or kagent's own runtime code.
conformance: venv kagent
	$(VENV)/bin/pytest -q -p no:cacheprovider -m real_kagent

# Regal v0.39.0 is built with OPA 1.14 and cannot be rebuilt on the pinned OPA 1.22.3 (their gobwas/glob
# versions are incompatible); the pinned opa is the compiler of record, Regal only lints.
test-rego: tools
	opa fmt --list --fail policies/rego
	opa check --strict --schema docs/schema/decision-input.schema.json policies/rego
	opa test policies/rego
	regal lint --config-file .regal/config.yaml policies/rego

test-py: venv pg tools kagent
	$(VENV)/bin/pytest -q -p no:cacheprovider

test: test-rego test-py

demo: venv
	$(VENV)/bin/memgov demo

bench: venv pg kagent
	$(VENV)/bin/memgov bench proxy

# The long fuzz run (make test runs a bounded sample); override FUZZ_CASES / FUZZ_SEED.
FUZZ_CASES ?= 100000
FUZZ_SEED ?= 1
fuzz: venv
	$(VENV)/bin/memgov fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

# The chart carries a copy of policies/ (Helm reads only files inside the chart); refresh it after edits.
chart-policies:
	scripts/sync-chart-policies.sh

clean:
	rm -rf $(VENV) .tools .memgov
