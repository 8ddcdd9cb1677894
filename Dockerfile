# syntax=docker/dockerfile:1
# The imagerefresh operator image, for linux/amd64 and linux/arm64. Two stages: the builder
# turns the source into a wheel and installs it, with its dependencies for the TARGET platform,
# into a virtualenv; the final stage is the same slim Python with only that virtualenv copied in
# — no compilers, no pip, no source tree.
#
# The builder always runs on the build machine's own platform (--platform=$BUILDPLATFORM) and
# fetches the target's wheels (pip --platform, binary wheels only), so building the arm64 image
# on an amd64 machine emulates nothing but the final stage's one short RUN. A virtualenv is
# portable between the two as long as both bases are the same Python at the same path, which
# they are (one base image, or one Debian release).
#
# Build: docker buildx build --platform linux/amd64,linux/arm64 -t imagerefresh:0.1.0 .
#        (entrypoint `imagerefresh run`; a single platform: docker build -t imagerefresh:0.1.0 .)
# Without Docker or docker.io: `make image` (podman, on a base made from Debian's packages and
# passed as BUILDER_BASE / RUNTIME_BASE; see e2e/build-image), `make release` for both platforms.

# The builder needs Python with venv and ensurepip; the runtime only Python.
ARG BUILDER_BASE=python:3.11-slim
ARG RUNTIME_BASE=python:3.11-slim
# The build machine's platform and the target's: docker buildx and podman set them (podman 4.3
# expands them in FROM only when passed as --build-arg, which e2e/build-image does).
ARG BUILDPLATFORM
ARG TARGETPLATFORM

FROM --platform=${BUILDPLATFORM} ${BUILDER_BASE} AS builder
# Set by the builder (docker buildx, podman) from --platform: amd64 or arm64.
ARG TARGETARCH
# A CA bundle for pip where a TLS-inspecting proxy stands before PyPI (e2e/build-image passes
# the host's $PIP_CERT); empty means the base's own trust store. Builder stage only.
ARG PIP_CERT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY operator/ operator/
# The package is pure Python; its dependencies' binary wheels are the target's: every
# manylinux tag the base's glibc runs (pip does not widen a manylinux_2_X tag by itself), for
# the base's Python. pip leaves the venv once the package is in: the final stage gets no
# installer. The wheels' shared objects carry their debug symbols (about 13 MiB, aiohttp's
# parsers and PyYAML's mostly): strip drops them, keeping every symbol the loader needs. It is
# binutils-multiarch's, which reads the target's objects whatever the build machine; a builder
# base without one installs it first (python:*-slim has no binutils).
# (set -eu: podman ignores SHELL in the OCI image format. $target is a list, split on purpose.)
# (binutils-multiarch is a build tool, so whichever version Debian has serves.)
# hadolint ignore=SC2086,DL3008
RUN set -eu; \
    case "$(strip --info 2>/dev/null || true)" in \
      *x86-64*aarch64* | *aarch64*x86-64*) ;; \
      *) apt-get update -qq; apt-get install -y -qq --no-install-recommends binutils-multiarch ;; \
    esac; \
    case "${TARGETARCH:-amd64}" in \
      amd64) cpu=x86_64 ;; \
      arm64) cpu=aarch64 ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}: amd64 or arm64" >&2; exit 1 ;; \
    esac; \
    python3 -m venv /opt/venv; \
    site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
    target=$(/opt/venv/bin/python -c 'import os, sys; cpu = sys.argv[1]; \
      glibc = int(os.confstr("CS_GNU_LIBC_VERSION").split(".")[1]); \
      version = "%d%d" % sys.version_info[:2]; \
      tags = ["manylinux_2_%d_%s" % (minor, cpu) for minor in range(glibc, 16, -1)]; \
      tags.append("manylinux2014_" + cpu); \
      print(" ".join(["--platform=" + tag for tag in tags] \
        + ["--python-version=" + version, "--implementation=cp", "--abi=cp" + version]))' "$cpu"); \
    /opt/venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .; \
    /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: $target --target "$site" \
      /wheels/imagerefresh-*.whl; \
    mv "$site"/bin/* /opt/venv/bin/; \
    rmdir "$site/bin"; \
    /opt/venv/bin/pip uninstall --yes pip setuptools wheel; \
    find /opt/venv -name '*.so' -type f -exec strip --strip-unneeded {} +

# (Explicit, though it is the default: podman 4.3 would carry the builder's platform over.)
# hadolint ignore=DL3065
FROM --platform=${TARGETPLATFORM} ${RUNTIME_BASE}
LABEL org.opencontainers.image.title="imagerefresh" \
      org.opencontainers.image.description="Keeps workloads on the newest digest of their tracked tags" \
      org.opencontainers.image.licenses="Apache-2.0"
# A system user with a fixed numeric id, the image's USER (the chart sets none, so this one
# serves; runAsNonRoot needs it numeric). Nothing in the image is written at run time, so any
# other user works as well: OpenShift assigns one from the namespace's range, with group 0.
# The entries are written, not made by useradd: a base need not carry Debian's passwd for two
# lines. The slim base's own pip goes too (a base without one has nothing to remove).
RUN echo 'imagerefresh:x:65532:65532:imagerefresh:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'imagerefresh:x:65532:' >> /etc/group \
    && rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/site-packages/pip \
       /usr/local/lib/python3*/site-packages/pip-*
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# /healthz (liveness) and /metrics.
EXPOSE 8080 9090
# `imagerefresh run`'s options are the container's args; the global log options come from
# IMAGEREFRESH_LOG_LEVEL / IMAGEREFRESH_LOG_FORMAT. Other commands: --entrypoint imagerefresh.
ENTRYPOINT ["imagerefresh", "run"]
