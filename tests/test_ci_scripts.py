"""The shell that CI and the Makefile run cannot fail a good submission at random.

- every shell script of the checkout passes `shellcheck` (skipped where it is not
  installed, unless CASEKIT_REQUIRE_SHELLCHECK=1, as `.ci/run` sets);
- no pipeline in `.ci/`, `containers/` or the Makefile feeds a reader that exits at
  its first match (`grep -q`, `grep -m`, `head`, `sed ...q`, `awk ... exit`): under
  `set -o pipefail` the writer then dies of SIGPIPE and the pipeline fails although
  the match was found (`unzip -l "$wheel" | grep -q ...` failed 3 runs in 30 that way).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHEBANG = re.compile(rb"^#!\s*(/usr/bin/env\s+)?(/\S*/)?(ba|da|k)?sh\b")
# a pipe into a reader that may stop reading before its writer is done
EARLY_EXIT_READER = re.compile(
    r"\|\s*(?:grep\s+(?:-\w*[qm]|--quiet|--silent|--max-count)|head\b|sed\s+(?:-n\s+)?['\"]?[^|]*\bq\b|awk\s+[^|]*\bexit\b)"
)
PIPELINE_PLACES = (".ci", "containers", "Makefile")


def shell_scripts() -> list[Path]:
    """Every file of the checkout that starts with a sh/bash shebang (git's list where there is one)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True, timeout=60
        ).stdout.split(b"\0")
        candidates = [REPO / os.fsdecode(name) for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        candidates = [p for place in PIPELINE_PLACES for p in (REPO / place).rglob("*")]
    scripts = []
    for path in candidates:
        if path.is_file() and not path.is_symlink() and "tests/fixtures" not in path.as_posix():
            with open(path, "rb") as handle:
                if SHEBANG.match(handle.readline()):
                    scripts.append(path)
    return sorted(scripts)


def shellcheck(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("shellcheck")
    if binary is None:
        if os.environ.get("CASEKIT_REQUIRE_SHELLCHECK") == "1":
            pytest.fail("shellcheck is not installed (CASEKIT_REQUIRE_SHELLCHECK=1)")
        pytest.skip("shellcheck is not installed (apt-get install -y shellcheck)")
    return subprocess.run(
        [binary, "--format=gcc", "--external-sources", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )


def test_the_ci_scripts_are_found() -> None:
    names = {path.relative_to(REPO).as_posix() for path in shell_scripts()}
    assert {".ci/run", ".ci/wheel-check.sh", ".ci/docker-setup.sh", "containers/make-base-image.sh"} <= names


def test_every_shell_script_passes_shellcheck() -> None:
    done = shellcheck(shell_scripts())
    assert done.returncode == 0, done.stdout + done.stderr


def test_shellcheck_reports_a_planted_mistake(tmp_path: Path) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("#!/usr/bin/env bash\nfolder=$1\nrm -rf $folder/*\n")  # unquoted: SC2086
    done = shellcheck([script])
    assert done.returncode != 0 and "SC2086" in done.stdout


def pipeline_problems(text: str) -> list[str]:
    """The lines that pipe into an early-exit reader (comments left out)."""
    return [line.strip() for line in text.splitlines() if EARLY_EXIT_READER.search(line.split("#", 1)[0])]


def test_no_pipeline_feeds_a_reader_that_exits_at_its_first_match() -> None:
    found = {}
    for place in PIPELINE_PLACES:
        root = REPO / place
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            problems = pipeline_problems(path.read_text(encoding="utf-8", errors="replace"))
            if problems:
                found[path.relative_to(REPO).as_posix()] = problems
    assert found == {}


@pytest.mark.parametrize(
    "line",
    [
        'unzip -l "$wheel" | grep -q "$member" || fail "the wheel lacks $member"',
        "docker images | grep -m1 casekit",
        "pip list | head -3",
        "git log | sed -n '1p;q'",
        "ps aux | awk '/dockerd/ {found=1; exit}'",
        "cmd 2>&1 | grep --quiet ready",
    ],
)
def test_the_pipeline_check_catches_each_early_exit_reader(line: str) -> None:
    assert pipeline_problems(f"set -o pipefail\n{line}\n") == [line]


@pytest.mark.parametrize(
    "line",
    [
        'grep -q "$member" "$WORK/wheel.list" || fail "the wheel lacks $member"',
        '"$CASEKIT" images build --torch "$TORCH" 2>&1 | tee images.log',
        'tar -C "$ROOTFS" -c . | docker import - "$TAG"',
        "# `unzip | grep -q` under pipefail fails when grep exits at its first match",
    ],
)
def test_the_pipeline_check_leaves_readers_that_read_everything(line: str) -> None:
    assert pipeline_problems(line) == []
