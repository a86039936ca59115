#!/usr/bin/env bash
# The wheel, not the checkout: build it, install it into a fresh venv outside the
# checkout, and from a folder outside the checkout
#   1. capture a small script (the probe and the data files come from the wheel),
#   2. replay it in a managed venv with torch $TORCH (the venv runner),
#   3. build the docker replay image for $TORCH on $BASE_IMAGE (the Dockerfile is
#      package data) with `casekit images build`; when the engine already has that
#      image, CASEKIT_WHEEL_CHECK_REBUILD=1 forces a rebuild through the API.
# The venv sees the system site-packages for torch (the capture runs on this
# interpreter's torch) but casekit itself must come from the venv: checked.
#
#   .ci/wheel-check.sh            # CASEKIT_REQUIRE_DOCKER=1: a missing engine is a failure, not a skip
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH="${CASEKIT_CHECK_TORCH:-2.13.0}"
BASE_IMAGE="${CASEKIT_BASE_IMAGE:-casekit-base:bookworm}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/casekit-wheel-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
stamp() { echo "[wheel-check $(( $(date +%s) - start ))s] $*"; }
fail() { echo "wheel-check: $*" >&2; exit 1; }

stamp "building the sdist, then the wheel from it (no stale build/ folder of the checkout can leak in)"
"$PYTHON" -m build --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log" >&2; fail "python -m build failed"; }
wheel=$(ls "$WORK"/dist/casekit-*.whl)
# listed to a file first: unzip piped into an early-exit reader fails under pipefail when the reader stops at its first match (SIGPIPE)
unzip -l "$wheel" >"$WORK/wheel.list"
for member in casekit/runners/docker/Dockerfile casekit/runners/docker/Dockerfile.job casekit/runners/sandbox_launcher.py casekit/probe.py casekit/schedule/templates/slurm.sbatch; do
    grep -q "$member" "$WORK/wheel.list" || fail "the wheel lacks $member"
done

stamp "installing $(basename "$wheel") into a fresh venv"
"$PYTHON" -m venv --system-site-packages "$WORK/venv"
VPY="$WORK/venv/bin/python"
CAPTURE_ALLOW=()
# --ignore-installed: an editable casekit in the system site-packages must not satisfy the requirement;
# the second install brings the dependencies the system lacks (docker[ssh]'s paramiko...).
"$VPY" -m pip install -q --no-deps --ignore-installed "$wheel"
"$VPY" -m pip install -q "$wheel"
CASEKIT="$WORK/venv/bin/casekit"
if ! "$VPY" -c 'import torch' 2>/dev/null; then
    # $PYTHON is a venv (make setup's .venv): its torch is not in the system site-packages this venv sees.
    # A path entry (not a site dir: no .pth of that folder runs) shows torch, after the venv's own casekit.
    torch_site=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    "$VPY" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/torch-from-host.pth", "w").write(sys.argv[1] + "\n")' "$torch_site"
    # That folder is outside this venv, so the sandbox does not show it unless asked: the flag its refusal names.
    CAPTURE_ALLOW=(--allow "read=$torch_site")
fi

mkdir "$WORK/outside"
cd "$WORK/outside"
"$VPY" - "$WORK/venv" <<'EOF'
import sys
from importlib import resources

import casekit

venv = sys.argv[1]
assert casekit.__file__.startswith(venv), f"casekit imported from {casekit.__file__}, not from the wheel in {venv}"
dockerfile = resources.files("casekit.runners.docker") / "Dockerfile"
assert str(dockerfile).startswith(venv) and dockerfile.is_file(), dockerfile
print(f"casekit {casekit.__file__}")
EOF

cat >graph_break.py <<'EOF'
import torch


@torch.compile
def scale_by_total(x):
    total = x.sum().item()  # graph break: Tensor.item
    return x * total


print(scale_by_total(torch.ones(3)))
EOF

stamp "capture (this interpreter's torch)"
"$CASEKIT" capture graph_break.py --archive cases --id wheel-check --title "wheel check" --timeout 300 "${CAPTURE_ALLOW[@]}"
grep -q 'Tensor.item\|item()' cases/wheel-check.toml || fail "the captured bundle records no Tensor.item break"

stamp "replay on a managed venv with torch $TORCH"
"$CASEKIT" replay --archive cases --runner venv --torch "$TORCH" --no-record --json replay.json
"$VPY" - <<'EOF'
import json

document = json.load(open("replay.json"))
text = json.dumps(document)
assert "wheel-check" in text and "persists" in text, text[:2000]
print("replay: the break persists")
EOF

if ! docker info >/dev/null 2>&1; then
    [[ "${CASEKIT_REQUIRE_DOCKER:-0}" == 1 ]] && fail "no Docker engine (CASEKIT_REQUIRE_DOCKER=1)"
    stamp "no Docker engine: image build skipped"
    exit 0
fi
stamp "docker image build for torch $TORCH on $BASE_IMAGE"
"$CASEKIT" images build --torch "$TORCH" --base-image "$BASE_IMAGE" 2>&1 | tee images.log
if grep -q "docker: reusing" images.log && [[ "${CASEKIT_WHEEL_CHECK_REBUILD:-0}" != 1 ]]; then
    # A fresh CI machine always builds above; a dev machine that has the image pays ~5 min only when asked
    # (the install stage's layers are pruned after each build, so a rebuild installs torch again).
    stamp "the image was already present; CASEKIT_WHEEL_CHECK_REBUILD=1 rebuilds it from the wheel's Dockerfile"
elif grep -q "docker: reusing" images.log; then
    "$VPY" - "$TORCH" "$BASE_IMAGE" <<'EOF'
import sys

from casekit.runners.docker import images
from casekit.runners.interface import TargetSpec

torch, base = sys.argv[1:]
recipe = images.recipe_for(TargetSpec(runner="docker", torch=torch, options=(("base_image", base),)))
image = images.build_image(recipe, lambda line: None)
print(f"rebuilt {recipe.tag} from the wheel's Dockerfile: {image.short_id}")
EOF
fi
stamp "done: the wheel captured, replayed (venv) and had its docker image"
