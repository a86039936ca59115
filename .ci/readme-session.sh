#!/usr/bin/env bash
# The README's "A session", top to bottom, as a new user runs it: the wheel installed with
# `uv tool install --with torch` (an environment with no pip), from a folder outside the checkout.
# Then the commands that differ for a pipx-style install (pip into a fresh venv, nothing of it on PATH
# but `casekit`, so no uv there): a bisect over three releases, whose envs must be built with the uv
# that comes with casekit's `uv` dependency and hard-linked into uv's cache; their disk is printed.
# Every command of the README's session block runs here with the README's options (the test
# tests/test_readme_session.py checks that none is missing); the placeholders are real files:
# repro.py/repro_fixed.py (examples/starter/item-branch), a repro that imports model.py and reads
# configs/, a crash.py kept on purpose, ~/envs/nightly (a venv on this machine's torch), and
# ~/src/model (a git repository whose HEAD broke model.py:42 since v1.2).
#
#   .ci/readme-session.sh [WHEEL]        # builds the wheel when none is given
#   CASEKIT_TORCH_WHEELS=/opt/wheels      # where the local torch wheel for --with torch is (find-links)
#   CASEKIT_REQUIRE_DOCKER=1              # the docker replay step must run, not skip
# Each step prints its wall time ("[session Ns] ... took Ms"); the transcript is $WORK/transcript.txt.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH_WHEELS="${CASEKIT_TORCH_WHEELS:-/opt/wheels}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/casekit-readme-session.XXXXXX")"
[[ "${CASEKIT_KEEP_SESSION:-0}" == 1 ]] || trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
stamp() { echo "[session $(( $(date +%s) - start ))s] $*"; }
fail() { echo "readme-session: $*" >&2; exit 1; }
# step EXPECTED_CODES COMMAND...: run one README command, time it, and check its exit code
step() {
    local codes=$1 began code
    shift
    began=$(date +%s%N)
    stamp "\$ $*"
    set +e
    "$@"
    code=$?
    set -e
    local tenths=$(( ($(date +%s%N) - began) / 100000000 ))
    printf '%s\t%d.%d\t%s\n' "$code" $((tenths / 10)) $((tenths % 10)) "$*" >>"$WORK/timings.tsv"
    [[ ",$codes," == *",$code,"* ]] || fail "exit $code (expected $codes): $*"
    stamp "took $(tail -1 "$WORK/timings.tsv" | cut -f2) s, exit $code"
}

wheel="${1:-}"
if [[ -z "$wheel" ]]; then
    stamp "building the wheel"
    "$PYTHON" -m build --wheel --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1 \
        || { tail -20 "$WORK/build.log" >&2; fail "python -m build failed"; }
    wheel=$(ls "$WORK"/dist/casekit-*.whl)
fi

# The tool's own folders, so the user's installed tools are left alone; torch beside it as the README says.
export UV_TOOL_DIR="$WORK/uv-tools" UV_TOOL_BIN_DIR="$WORK/bin"
links=()
[[ -d "$TORCH_WHEELS" ]] && links=(--find-links "$TORCH_WHEELS")
torch_spec="torch==2.13.0"
compgen -G "$TORCH_WHEELS/torch-2.13.0+cpu-*.whl" >/dev/null && torch_spec="torch==2.13.0+cpu"
step 0 uv tool install --quiet --compile-bytecode --with "$torch_spec" "${links[@]}" "$wheel"
export PATH="$WORK/bin:$PATH"
[[ "$(command -v casekit)" == "$WORK/bin/casekit" ]] || fail "casekit is not the uv tool's: $(command -v casekit)"
tool_python=$(head -1 "$WORK/bin/casekit" | sed 's/^#!//')
"$tool_python" -c 'import pip' 2>/dev/null && fail "the uv tool environment has pip: this would not test the no-pip install"
compgen -G "$UV_TOOL_DIR/casekit/lib/python*/site-packages/torch/__pycache__/__init__.cpython-*.pyc" >/dev/null \
    || fail "the README's install (--compile-bytecode) left torch without bytecode"
step 0 casekit --version

# The placeholders of the README, made real.
mkdir -p "$WORK/session" "$WORK/home/envs" "$WORK/home/src"
cd "$WORK/session"
git init -q . && git config user.email session@casekit.invalid && git config user.name "readme session"
cp "$REPO/examples/starter/item-branch/repro.py" repro.py
cp "$REPO/examples/starter/item-branch/fixed.py" repro_fixed.py
mkdir -p with-files/configs
cat >with-files/model.py <<'EOF'
import torch


def scale(x, factor):
    if x.sum().item() > 0:  # graph break: Tensor.item
        return x * factor
    return x
EOF
echo '{"factor": 2.0}' >with-files/configs/scale.json
cat >with-files/repro.py <<'EOF'
import json

import torch

from model import scale

factor = json.load(open("configs/scale.json"))["factor"]
print(torch.compile(scale)(torch.ones(3), factor))
EOF
cat >crash.py <<'EOF'
import torch


@torch.compile
def step(x):
    print("logging inside a compiled step")  # graph break: print
    return x.relu()


print(step(torch.ones(2)))
EOF
"$PYTHON" -m venv --system-site-packages "$WORK/home/envs/nightly"  # "an interpreter you already have" (this torch)
NIGHTLY="$WORK/home/envs/nightly/bin/python"
if ! "$NIGHTLY" -c 'import torch' 2>/dev/null; then  # $PYTHON is itself a venv (make setup's .venv): a torch of its own
    # (a .pth line to the host's would name a folder outside the env, which the sandbox does not show)
    uv pip install --quiet --python "$NIGHTLY" "${links[@]}" "$torch_spec" numpy
fi
MODEL="$WORK/home/src/model"
mkdir -p "$MODEL" && (
    cd "$MODEL"
    git init -q . && git config user.email session@casekit.invalid && git config user.name "readme session"
    { echo "import torch"; echo; for _ in $(seq 3 40); do echo "# padding"; done
      echo "def train_step(x):"; echo "    y = x * 2"; echo "    return y"; } >model.py
    printf 'import torch\n\nfrom model import train_step\n\nprint(torch.compile(train_step)(torch.ones(3)))\n' >train_step.py
    git add -A && git commit -qm "v1.2" && git tag v1.2
    echo "# a harmless change" >>train_step.py && git commit -qam "docs"
    sed -i '42s/.*/    y = x * 2 if x.sum().item() > 0 else x  # graph break/' model.py && git commit -qam "branch on the sum"
    echo "# another" >>train_step.py && git commit -qam "more docs"
)

stamp "1. capture"
step 0 casekit capture repro.py --fixed repro_fixed.py --title "item() branch in step" --id item-branch \
    --tag data-dependent --notes "..." --rollback "drop fullgraph=True; keep the torch.where rewrite"
(cd with-files && step 0 casekit capture repro.py --include model.py --include configs/ --archive ../cases)
step 0 casekit capture crash.py --waive fix --notes "documents the crash"
step 0 casekit list
step 0 casekit show item-branch
step 0 casekit validate

stamp "2. replay"
step 0,1 casekit replay --torch 2.5.1 --torch 2.13 --json out/replay.json --fail-on warn
step 0 casekit report --results out/replay.json --out out/report
[[ -f out/report/index.html ]] || fail "report wrote no out/report/index.html"
step 0 casekit replay --python "$NIGHTLY"
if docker info >/dev/null 2>&1 && docker image inspect casekit-base:bookworm >/dev/null 2>&1; then
    if [[ -d "$TORCH_WHEELS" ]]; then
        step 0 casekit replay --runner docker --torch 2.13.0 --base-image casekit-base:bookworm --find-links "$TORCH_WHEELS"
    else
        step 0 casekit replay --runner docker --torch 2.13.0 --base-image casekit-base:bookworm
    fi
else
    [[ "${CASEKIT_REQUIRE_DOCKER:-0}" == 1 ]] && fail "no Docker engine or casekit-base:bookworm (CASEKIT_REQUIRE_DOCKER=1)"
    stamp "no Docker engine with casekit-base:bookworm: the docker replay is skipped"
fi
commits=$(git rev-list --all --count)
step 0 casekit replay --torch 2.13 --commit
(( $(git rev-list --all --count) > commits )) || fail "replay --commit made no commit"

stamp "3. since when?"
step 0 casekit bisect item-branch --good 2.5.1 --bad 2.13.0 --html out/bisect.html
grep -q "compare" out/bisect.html || fail "the bisect page has no compare link"
step 0 casekit bisect --all --good 2.5.1 --bad 2.13.0
step 0 casekit bisect-commits --repo "$MODEL" --good v1.2 --bad HEAD --site model.py:42 -- python train_step.py

stamp "4. a pipx-style install (pip into a fresh venv, no uv on PATH): a bisect over three releases"
PIPX="$WORK/pipx"
"$PYTHON" -m venv "$PIPX/venv"  # what pipx makes: a venv with pip, the app's entry point alone on PATH
step 0 "$PIPX/venv/bin/python" -m pip install --quiet "$wheel"
mkdir -p "$PIPX/bin" && ln -s "$PIPX/venv/bin/casekit" "$PIPX/bin/casekit"
bare_path="$PIPX/bin"
IFS=: read -r -a folders <<<"$PATH"
for folder in "${folders[@]}"; do  # this PATH without any folder that has a uv (make setup's .venv has one)
    [[ -n "$folder" && ! -x "$folder/uv" && "$folder" != "$WORK/bin" ]] && bare_path="$bare_path:$folder"
done
PATH="$bare_path" command -v uv >/dev/null && fail "uv is still on PATH: $(PATH="$bare_path" command -v uv)"
first_cache="${CASEKIT_CACHE:-$HOME/.cache/casekit}"
# Three releases the session's bisect already downloaded (its ends and one it probed between them), so
# uv's cache serves them: the envs are new, the downloads are not.
mapfile -t built < <(for marker in "$first_cache"/envs/*/casekit-env.json; do
    sed -n 's/^ *"torch": "\([0-9][0-9.]*\)[+"].*/\1/p; T; q' "$marker"; done | sort -uV)
middle=""
for version in "${built[@]}"; do
    [[ "$(printf '%s\n' 2.5.1 "$version" 2.13.0 | sort -V | tr '\n' ' ')" == "2.5.1 $version 2.13.0 " ]] \
        && [[ "$version" != 2.5.1 && "$version" != 2.13.0 ]] && middle="$version"
done
middle="${middle:-2.6.0}"
(
    export PATH="$bare_path" CASEKIT_CACHE="$PIPX/cache" UV_CACHE_DIR="$first_cache/uv"
    [[ "$(command -v casekit)" == "$PIPX/bin/casekit" ]] || fail "casekit is not the pipx-style install's"
    step 0 casekit bisect item-branch --good 2.5.1 --bad 2.13.0 --versions "2.5.1,$middle,2.13.0" --no-cache
)
envs=("$PIPX"/cache/envs/*/)
(( ${#envs[@]} == 3 )) || fail "the bisect over 2.5.1,$middle,2.13.0 built ${#envs[@]} env(s), not 3"
for env in "${envs[@]}"; do
    grep -q '"installer": "uv ' "$env/casekit-env.json" || fail "$env was not built with uv: $(grep installer "$env/casekit-env.json")"
    linked=$(find "$env" -type f -links +1 | wc -l)
    (( linked > 1000 )) || fail "$env: only $linked file(s) hard-linked into uv's cache"
done
# what the three envs take: as files (what pip's copies would), on disk (each file once), and of that what
# is their own (no other link: the rest is uv's cache, shared with every env built from it)
apparent=$(du -sb --count-links "$PIPX/cache" | cut -f1)
unique=$(du -sb "$PIPX/cache" | cut -f1)
own=$(find "$PIPX/cache" -type f -links 1 -printf '%b\n' | awk '{bytes += $1 * 512} END {print bytes + 0}')
stamp "the three envs (2.5.1, $middle, 2.13.0): $(( apparent / 1000000 )) MB as files, $(( unique / 1000000 )) MB on disk" \
    "(each file once), of which $(( own / 1000000 )) MB their own and the rest hard links into uv's cache"

stamp "done: the README's session ran in a uv tool install, its bisect again in a pipx-style one; per step (exit, seconds, command):"
cat "$WORK/timings.tsv"
