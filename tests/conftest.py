"""Shared test helpers: run the real CLI, find real interpreters, build cases from real scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
FIXTURES = ROOT / "tests" / "fixtures"
STARTER = ROOT / "examples" / "starter"


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
