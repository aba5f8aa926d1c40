# sdematrix: the package (+ Intel SDE when given) on a slim runtime.  See docs/DOCKER.md.
#
#   docker build -t sdematrix:latest .                           # registry base,
#                                                                # deps from PyPI
#   bash ci/make-base-image.sh && bash ci/build-wheelhouse.sh    # no registry,
#   docker build --build-arg BASE_IMAGE=sdematrix-base:bookworm \
#       -t sdematrix:latest .                                    # no PyPI in builds
#   docker build --build-arg SDE_URL=... --build-arg SDE_SHA256=... -t sdematrix .
#
# Two stages.  `build` has the compilers: it builds the package's wheel (the C
# library, both extensions, vc-probe and vc-tracer), compiles the QEMU plugin
# and unpacks SDE.  `runtime` has no compiler: Python, qemu-user, the
# dependencies' venv and the wheel, plus the plugin and SDE copied over.
#
# SDE is installed only when SDE_URL is given (SHA-256: SDE_SHA256, else the pin
# in ci/sde-version.env) or when a tarball sde-external-*-lin.tar.xz sits in
# ci/sde/ in the build context (same checksum rule).
# Python dependencies come from the wheels in ci/wheelhouse/ when there are any
# (installed with --no-index: nothing is fetched), else from PyPI.
ARG BASE_IMAGE=debian:bookworm-slim

# ----------------------------------------------------------------- build ---
FROM ${BASE_IMAGE} AS build

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

# gcc + libc6-dev + python3-dev: the C library, the extensions, the helper
# executables and the QEMU plugin.  curl/xz-utils/ca-certificates: SDE.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        gcc libc6-dev python3 python3-venv python3-dev \
        ca-certificates curl xz-utils \
 && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

# Dependencies first: this layer is rebuilt only when the wheel set or the
# requirement list changes, not when the sources do.  The venv is what the
# runtime stage copies, so it holds the run-time dependencies plus (until the
# package is built) the build back-end.
COPY ci/wheelhouse/ /tmp/wheelhouse/
COPY ci/requirements-image.txt /tmp/requirements-image.txt
RUN if ls /tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
        pip install -q --no-index --find-links /tmp/wheelhouse -r /tmp/requirements-image.txt; \
    else \
        pip install -q -r /tmp/requirements-image.txt; \
    fi \
 && rm -rf /tmp/wheelhouse

# Intel SDE, only when asked for; /opt/sde exists (empty) either way so the
# runtime stage can copy it.  The glob ci/sd[e]/ matches nothing when the
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
    else \
        mkdir -p /opt/sde; \
    fi; \
    rm -rf /tmp/ci

# The package's wheel: only what its build reads is copied, so editing tests
# or docs does not rebuild it (src/sdematrix/sde_matrix.yaml is a symlink to
# the top-level sde_matrix.yaml, hence that file too).  --no-build-isolation
# uses the setuptools/cffi installed above (no index needed).
COPY pyproject.toml setup.py _project_urls.py README.md LICENSE MANIFEST.in sde_matrix.yaml /src/
COPY native/ /src/native/
COPY dispatch/ /src/dispatch/
COPY src/ /src/src/
RUN pip wheel -q --no-build-isolation --no-deps --wheel-dir /wheels /src

# The QEMU plugin, compiled by the package's own builder into the cache the
# runtime stage points XDG_CACHE_HOME at (the file name carries a digest of
# the plugin sources and flags, so the runtime package finds it as built).
# Then the package and the build back-end leave the venv again.
ENV XDG_CACHE_HOME=/var/cache/xdg
RUN pip install -q --no-deps /wheels/*.whl \
 && python -c "from sdematrix.qemu_plugin import build_plugin; print(build_plugin())" \
 && pip uninstall -q -y sdematrix setuptools wheel

# --------------------------------------------------------------- runtime ---
FROM ${BASE_IMAGE} AS runtime

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

# python3: the venv's interpreter (the same Debian package as in the build
# stage).  qemu-user: the qemu backend, which runs only qemu-x86_64; dpkg is
# told not to unpack the other 34 emulators (~95 MB), nor docs, man pages and
# translations.  No compiler, no headers.
RUN printf '%s\n' \
        'path-exclude=/usr/bin/qemu-*' 'path-include=/usr/bin/qemu-x86_64' \
        'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
        'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/locale/*' \
        > /etc/dpkg/dpkg.cfg.d/sdematrix-slim \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 qemu-user \
 && rm -rf /var/lib/apt/lists/* \
 && qemu-x86_64 --version >/dev/null

COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

# The plugin cache is shared by every uid the container may run as
# (`sdematrix docker run` uses the caller's): world-writable + sticky, so the
# ptrace backend can add its per-image site cache next to the plugin.
ENV XDG_CACHE_HOME=/var/cache/xdg
COPY --from=build /var/cache/xdg /var/cache/xdg
RUN chmod 1777 /var/cache/xdg /var/cache/xdg/sdematrix \
 && chmod a+r /var/cache/xdg/sdematrix/*.so

COPY --from=build /opt/sde /opt/sde
RUN if [ -x /opt/sde/sde64 ]; then ln -s /opt/sde/sde64 /usr/local/bin/sde64; fi

# The wheel, then the checks: `pip check` fails the build if
# ci/requirements-image.txt misses one of pyproject's dependencies (the CLI
# imports some of them lazily); no C compiler is left; the QEMU plugin is
# found without one; the CLI runs.
COPY --from=build /wheels /tmp/wheels
RUN pip install -q --no-index --no-deps /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && pip check \
 && for c in cc gcc c99 clang; do \
        if command -v "$c" >/dev/null; then echo "compiler $c in the runtime image" >&2; exit 1; fi; \
    done \
 && python -c "from sdematrix.qemu_plugin import build_plugin; print(build_plugin())" \
 && sdematrix --version && sdematrix list-cpus >/dev/null

# The tracer ptraces its own child, which needs no root and no capability.
# Run as an unprivileged user; /out is where `sdematrix docker run` mounts
# the results directory.
RUN useradd --create-home --uid 1000 runner && mkdir -p /out && chown runner /out
USER runner
WORKDIR /home/runner
ENTRYPOINT ["sdematrix"]
CMD ["run", "--out", "/out", "--junit", "/out/junit.xml"]
