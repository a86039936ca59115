#!/usr/bin/env bash
# Make a Docker engine and the casekit base image available; idempotent.
#
# - starts dockerd in the background (log: /tmp/dockerd.log) when `docker info`
#   fails, and waits up to ~60 s for it;
# - builds casekit-base:bookworm with containers/make-base-image.sh when absent
#   (debootstrap, no registry needed), else reuses it.
#
# CI runs it after `apt-get install -y docker.io debootstrap`. Users on hosts
# with no container registry can run it too (as root), then replay with
# `--base-image casekit-base:bookworm`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_TAG="${CASEKIT_BASE_IMAGE:-casekit-base:bookworm}"

if ! docker info >/dev/null 2>&1; then
    if [[ -n "${DOCKER_HOST:-}" ]]; then
        echo "DOCKER_HOST=$DOCKER_HOST is set but unreachable; not starting a local dockerd" >&2
        exit 1
    fi
    command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install -y docker.io" >&2; exit 1; }
    echo "starting dockerd (log: /tmp/dockerd.log)"
    nohup dockerd >/tmp/dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "dockerd did not come up; see /tmp/dockerd.log" >&2; tail -20 /tmp/dockerd.log >&2; exit 1; }
fi
echo "docker engine ready: $(docker version --format '{{.Server.Version}}')"

"$HERE/containers/make-base-image.sh" "$BASE_TAG"
