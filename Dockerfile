# sdematrix: toolchain + package (+ Intel SDE when given).  See docs/DOCKER.md.
#
#   docker build -t sdematrix:latest .                           # registry base,
#                                                                # deps from PyPI
#   bash ci/make-base-image.sh && bash ci/build-wheelhouse.sh    # no registry,
#   docker build --build-arg BASE_IMAGE=sdematrix-base:bookworm \
#       -t sdematrix:latest .                                    # no PyPI in builds
#   docker build --build-arg SDE_URL=... --build-arg SDE_SHA256=... -t sdematrix .
#
# SDE is installed only when SDE_URL is given (SHA-256: SDE_SHA256, else the pin
# in ci/sde-version.env) or when a tarball sde-external-*-lin.tar.xz sits in
# ci/sde/ in the build context (same checksum rule).
# Python dependencies come from the wheels in ci/wheelhouse/ when there are any
# (installed with --no-index: nothing is fetched), else from PyPI.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

# gcc + libc6-dev + python3-dev: the package compiles its C library, the cffi
# extension and the helper executables.  qemu-user: the qemu backend.
# curl/xz-utils/ca-certificates: fetching and unpacking SDE.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        gcc libc6-dev binutils python3 python3-venv python3-dev \
        ca-certificates curl xz-utils qemu-user \
 && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

# Dependencies first: this layer is rebuilt only when the wheel set or the
# requirement list changes, not when the sources do.
COPY ci/wheelhouse/ /tmp/wheelhouse/
COPY ci/requirements-image.txt /tmp/requirements-image.txt
RUN if ls /tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
        pip install -q --no-index --find-links /tmp/wheelhouse -r /tmp/requirements-image.txt; \
    else \
        pip install -q -r /tmp/requirements-image.txt; \
    fi \
 && rm -rf /tmp/wheelhouse

# Intel SDE, only when asked for.  The glob ci/sd[e]/ matches nothing when the
# directory is absent, which COPY accepts because the other sources exist.
ARG SDE_URL=""
ARG SDE_SHA256=""
COPY ci/install-sde.sh ci/sde-version.env ci/sd[e]/ /tmp/ci/
RUN set -e; \
    tb="$(ls /tmp/ci/sde-external-*-lin.tar.xz 2>/dev/null | head -1 || true)"; \
    if [ -n "$SDE_URL" ] || [ -n "$tb" ]; then \
        if [ -n "$SDE_SHA256" ]; then export SDE_SHA256_OVERRIDE="$SDE_SHA256"; fi; \
        if [ -n "$SDE_URL" ]; then export SDE_URL_OVERRIDE="$SDE_URL"; fi; \
        if [ -n "$tb" ]; then export SDE_TARBALL="$tb"; fi; \
        bash /tmp/ci/install-sde.sh /opt/sde; \
        ln -s /opt/sde/sde64 /usr/local/bin/sde64; \
    fi; \
    rm -rf /tmp/ci

# The package: only what its build reads, so that editing tests or docs does
# not rebuild it (src/sdematrix/sde_matrix.yaml is a symlink to the top-level
# sde_matrix.yaml, hence that file too).  --no-build-isolation uses the setuptools/wheel/cffi
# installed above (no index needed); --no-deps: they are all installed, and
# `pip check` fails the build if ci/requirements-image.txt misses one of
# pyproject's dependencies (the CLI imports some of them lazily).
COPY pyproject.toml setup.py README.md sde_matrix.yaml /src/
COPY native/ /src/native/
COPY dispatch/ /src/dispatch/
COPY src/ /src/src/
RUN pip install -q --no-build-isolation --no-deps /src \
 && rm -rf /src \
 && pip check \
 && sdematrix --version && sdematrix list-cpus >/dev/null

# The tracer ptraces its own child, which needs no root and no capability.
# Run as an unprivileged user; /out is where `sdematrix docker run` mounts
# the results directory.
RUN useradd --create-home --uid 1000 runner && mkdir -p /out && chown runner /out
USER runner
WORKDIR /home/runner
ENTRYPOINT ["sdematrix"]
CMD ["run", "--out", "/out", "--junit", "/out/junit.xml"]
