#!/usr/bin/env bash
# The test command: starts the services the tests use (dockerd, when it is
# installed, not running, and we are root), then runs the whole pytest suite
# on 2 workers.  The Docker tests share one xdist group (--dist loadgroup) so
# that one worker builds the images while the other runs the rest.  Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "ci/test.sh: starting dockerd (log: /tmp/sdematrix-dockerd.log)"
        (setsid dockerd >/tmp/sdematrix-dockerd.log 2>&1 &)
        for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    fi
    docker info >/dev/null 2>&1 \
        || echo "ci/test.sh: warning: no Docker engine; the Docker tests will fail" >&2
fi
# dockerd is installed (ci/bootstrap.sh does that): the Docker tests must run,
# an unreachable engine fails them instead of skipping them.
if command -v dockerd >/dev/null; then
    export SDEMATRIX_REQUIRE_DOCKER=1
fi
echo "ci/test.sh: sdematrix doctor (what this host can run):"
sdematrix doctor || echo "ci/test.sh: warning: sdematrix doctor found no runnable model" >&2
# -rs: every skip is printed with its reason (a skip is a claim about this host).
exec python3 -m pytest -q -rs -n 2 --dist loadgroup "$@"
