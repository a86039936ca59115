#!/usr/bin/env bash
# Build the casekit base image (Debian bookworm + python3 + venv + CA certificates)
# without any container registry: debootstrap a minimal root filesystem and
# `docker import` it. Use it where Docker Hub is unreachable (air-gapped or
# proxied hosts); with a registry, the replay Dockerfile's default
# BASE_IMAGE=python:3.11-slim needs none of this.
#
#   sudo containers/make-base-image.sh [IMAGE_TAG]      # default casekit-base:bookworm
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian),
# DEBIAN_SUITE (default bookworm; its python3 is 3.11, matching cp311 wheels).
# Needs root, debootstrap and a running Docker engine. Idempotent: an existing
# image with that tag is reused unless FORCE=1.
set -euo pipefail

TAG="${1:-casekit-base:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-venv,python3-pip,ca-certificates"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "base image $TAG present; reusing it"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install -y debootstrap" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "debootstrap needs root" >&2; exit 1; }

ROOTFS="$(mktemp -d /tmp/casekit-rootfs.XXXXXX)"
trap 'rm -rf --one-file-system "$ROOTFS"' EXIT

echo "debootstrap $SUITE ($MIRROR) into $ROOTFS"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR"

# Keep the image small and reproducible-ish: no apt caches, no logs.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log

PYVER="$(chroot "$ROOTFS" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
echo "importing $TAG (python $PYVER)"
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    --change "LABEL casekit.base-image=debootstrap-$SUITE casekit.base-python=$PYVER" \
    - "$TAG"
echo "built $TAG"
