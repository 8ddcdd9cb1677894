# Everything a fresh machine needs is installed from here: `make test` and `make demo` do their
# own set-up. Heavy one-time builds (the control plane's Go binaries) are cached outside the
# repository in $(IMAGEREFRESH_CACHE), keyed by version.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export IMAGEREFRESH_CACHE ?= $(HOME)/.cache/imagerefresh
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# Debian packages the tests run for real: the distribution registry, openssl for the local
# control plane's certificates; podman and runc build and run the operator's image (no Docker
# engine) and runc also runs the real node's containers (e2e/local); mmdebstrap makes the image's
# local base from Debian's packages (docker.io is unreachable); busybox-static is what the real
# node's images (its sandbox, the tests' builds) run. The release's linux/arm64 image: its base
# is made under qemu-user-static (arch-test is how mmdebstrap checks the emulator), and skopeo
# writes the per-platform archives and pushes the index with its digests kept.
DEBIAN_PACKAGES := docker-registry openssl podman runc mmdebstrap busybox-static \
	qemu-user-static arch-test skopeo

.PHONY: setup system-deps binaries cluster-binaries image images release lint types contracts unit test demo clean mutation

system-deps:
	@missing=(); for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing+=($$p); done; \
	if [ $${#missing[@]} -gt 0 ]; then \
	  echo "installing Debian packages: $${missing[*]}"; \
	  $(SUDO) apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $${missing[@]}; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: system-deps $(VENV)/.installed

# The pinned Go builds of the test infrastructure (cached by version in $(IMAGEREFRESH_CACHE)):
# the control plane, the real node's runtime, helm, promtool, and cosign and the referrers
# registry the signature tests run — all before any test, so that none builds within its
# timeout. cluster-binaries: only what e2e/local runs (make demo).
binaries:
	e2e/build-binaries

cluster-binaries:
	e2e/build-binaries cluster

# The operator's image, built by podman from the Dockerfile on a base made from Debian's
# packages (cached in $(IMAGEREFRESH_CACHE)/base); prints its tag, ID and size.
image: system-deps
	e2e/build-image

# Every platform a release ships (linux/amd64, linux/arm64), so that the release test's builds
# are warm: the other architecture's base is made under qemu-user-static once (a few minutes,
# cached in $(IMAGEREFRESH_CACHE)/base, as every one-time build), its image in about a minute.
RELEASE_PLATFORMS := linux/amd64 linux/arm64
images: system-deps
	for platform in $(RELEASE_PLATFORMS); do e2e/build-image --platform $$platform; done

# The installable artifacts of pyproject.toml's version in $(DIST): the image for linux/amd64 and
# linux/arm64 (one OCI archive of the index, one loadable archive per platform), the chart
# pinned to the index's digest, the CLI's wheel and SHA256SUMS (see release/release.py). The
# arm64 image is built with qemu-user-static (e2e/binfmt registers it: root, once per boot).
# COSIGN_KEY=FILE signs the sums (its password in $$COSIGN_PASSWORD); PUSH=REGISTRY[/PREFIX]
# also pushes the image index and the chart (PUSH_PLAIN_HTTP=true for a registry without TLS;
# PUSH_TLS_VERIFY=false for one whose certificate is not trusted here, or one without TLS).
DIST ?= dist
COSIGN_KEY ?=
PUSH ?=
PUSH_PLAIN_HTTP ?=
PUSH_TLS_VERIFY ?=
release: setup
	$(BIN)/python release/release.py --dist '$(DIST)' \
	  $(if $(COSIGN_KEY),--cosign-key '$(COSIGN_KEY)') $(if $(PUSH),--push '$(PUSH)') \
	  $(if $(filter true 1 yes,$(PUSH_PLAIN_HTTP)),--plain-http) \
	  $(if $(filter false 0 no,$(PUSH_TLS_VERIFY)),--insecure-skip-tls-verify)

lint: setup
	$(BIN)/ruff check operator tests e2e e2e/local bench mutation release
	$(BIN)/ruff format --check operator tests e2e e2e/local bench mutation release

types: setup
	$(BIN)/mypy

contracts: setup
	$(BIN)/lint-imports

# Fast feedback without the cluster, and without the Go builds `make binaries` makes (cosign,
# the referrers registry): nothing here compiles.
unit: setup
	$(BIN)/pytest -m 'not cluster and not binaries' $(PYTEST_ARGS)

test: setup binaries images lint types contracts
	$(BIN)/pytest $(PYTEST_ARGS)

# How much the fast tests bite: mutmut over the pure core, score per module and every survivor
# (see mutation/run.py). Tens of minutes on 2 cores the first time; later runs test only what
# changed. MUTATION_ARGS: --max-children N, --fresh, --report-only, --strict.
$(VENV)/.installed-mutation: pyproject.toml | $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test,mutation]'
	touch $@

mutation: setup $(VENV)/.installed-mutation
	$(BIN)/python mutation/run.py $(MUTATION_ARGS)

# The main job, narrated, on the bundled local cluster, whatever $$KUBECONFIG says (see
# e2e/demo.py). DEMO_KUBECONFIG=FILE runs it on that cluster instead (one with kwok nodes), in
# two namespaces of its own that it deletes afterwards.
DEMO_KUBECONFIG ?=
demo: setup cluster-binaries
	$(BIN)/python e2e/demo.py $(if $(DEMO_KUBECONFIG),--kubeconfig '$(DEMO_KUBECONFIG)')

# The performance figures (docs/contributing/benchmarks.md) on its own local environment
# (.e2e-bench/); see bench/run.py.
.PHONY: bench
$(VENV)/.installed-bench: pyproject.toml | $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

bench: setup binaries $(VENV)/.installed-bench
	$(BIN)/python bench/run.py

clean:
	-e2e/local down
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
