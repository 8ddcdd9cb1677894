# syntax=docker/dockerfile:1
# The imagerefresh operator image. Two stages: the builder turns the source into a wheel and
# installs it (with its dependencies) into a virtualenv; the final stage is the same slim Python
# with only that virtualenv copied in — no compilers, no pip, no source tree.
# Build: docker build -t imagerefresh:0.1.0 .   (the entrypoint is `imagerefresh run`)
# Without Docker or docker.io: `make image` (podman, on a base made from Debian's packages and
# passed as BUILDER_BASE / RUNTIME_BASE; see e2e/build-image).

# The builder needs Python with venv and ensurepip; the runtime only Python.
ARG BUILDER_BASE=python:3.11-slim
ARG RUNTIME_BASE=python:3.11-slim

FROM ${BUILDER_BASE} AS builder
# A CA bundle for pip where a TLS-inspecting proxy stands before PyPI (e2e/build-image passes
# the host's $PIP_CERT); empty means the base's own trust store. Builder stage only.
ARG PIP_CERT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY operator/ operator/
# pip leaves the venv once the package is in: the final stage gets no installer.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && /opt/venv/bin/pip install --no-cache-dir /wheels/imagerefresh-*.whl \
    && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM ${RUNTIME_BASE}
LABEL org.opencontainers.image.title="imagerefresh" \
      org.opencontainers.image.description="Keeps workloads on the newest digest of their tracked tags" \
      org.opencontainers.image.licenses="Apache-2.0"
# A system user with a fixed numeric id (the chart runs as 65532:65532, runAsNonRoot). The
# slim base's own pip goes too (a base without one has nothing to remove).
RUN groupadd --system --gid 65532 imagerefresh \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin imagerefresh \
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
