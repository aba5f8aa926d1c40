#!/usr/bin/env bash
# The test command: starts the services the tests use (dockerd), then runs the
# whole pytest suite.  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        (dockerd >/tmp/sdematrix-dockerd.log 2>&1 &)
        for _ in $(seq 1 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
    fi
fi
exec python3 -m pytest -q -n 2 "$@"
