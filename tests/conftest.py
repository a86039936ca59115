"""Shared test helpers: run the real CLI, find real interpreters, build cases from real scripts."""

from __future__ import annotations

import os
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
