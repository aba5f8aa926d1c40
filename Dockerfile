# sdematrix: toolchain + package (+ Intel SDE when given).
#
#   docker build -t sdematrix .                                  # registry base
#   docker build --build-arg BASE_IMAGE=sdematrix-base:bookworm  # offline base
#       -t sdematrix .                                           # (ci/make-base-image.sh)
#   docker build --build-arg SDE_URL=... --build-arg SDE_SHA256=... -t sdematrix .
#
# SDE is installed only when SDE_URL + SDE_SHA256 are given (checksum enforced)
# or when a tarball named sde-external-*-lin.tar.xz sits in ci/sde/ in the build
# context (then SDE_SHA256, or the pin in ci/sde-version.env, is enforced).
# Python dependencies come from PyPI, or from wheels placed in ci/wheelhouse/
# (ci/build-wheelhouse.sh) on machines that reach no index from containers.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ARG SDE_URL=""
ARG SDE_SHA256=""
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        gcc libc6-dev binutils python3 python3-venv python3-dev \
        ca-certificates curl xz-utils qemu-user \
 && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first (cached layer), from the wheelhouse when it has wheels.
COPY ci/wheelhouse/ /tmp/wheelhouse/
COPY ci/requirements-image.txt /tmp/requirements-image.txt
RUN if ls /tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
        pip install --no-index --find-links /tmp/wheelhouse -r /tmp/requirements-image.txt; \
    else \
        pip install -r /tmp/requirements-image.txt; \
    fi

# Intel SDE, only when asked for.
COPY ci/ /tmp/ci/
RUN set -e; \
    tb="$(ls /tmp/ci/sde/sde-external-*-lin.tar.xz 2>/dev/null | head -1 || true)"; \
    if [ -n "$SDE_URL" ] || [ -n "$tb" ]; then \
        [ -n "$SDE_SHA256" ] && export SDE_SHA256_OVERRIDE="$SDE_SHA256"; \
        [ -n "$SDE_URL" ] && export SDE_URL_OVERRIDE="$SDE_URL"; \
        [ -n "$tb" ] && export SDE_TARBALL="$tb"; \
        bash /tmp/ci/install-sde.sh /opt/sde; \
    fi; \
    rm -rf /tmp/ci
ENV SDE_PATH_DEFAULT=/opt/sde/sde64

# The package (builds the cffi extension, vc-probe and vc-tracer).
COPY . /src
RUN if ls /tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
        pip install --no-index --find-links /tmp/wheelhouse --no-build-isolation /src; \
    else \
        pip install /src; \
    fi \
 && rm -rf /tmp/wheelhouse \
 && if [ -x /opt/sde/sde64 ]; then ln -s /opt/sde/sde64 /usr/local/bin/sde64; fi

# ptrace of one's own children needs no root; SDE (Pin) may need
# --cap-add SYS_PTRACE.  Run as an unprivileged user.
RUN useradd --create-home --uid 1000 runner && mkdir -p /out && chown runner /out
USER runner
WORKDIR /home/runner
ENTRYPOINT ["sdematrix"]
CMD ["run", "--out", "/out", "--junit", "/out/junit.xml"]
