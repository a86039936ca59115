"""The result formatted as a maintainer would file it: `ruff format`, when it is installed.

casekit depends on ruff (pyproject.toml), so an install has it; if it is missing or fails on a file
the text stays as `ast.unparse` wrote it (one statement a line, four-space indents), which is valid
and placed all the same. It runs as `python -m ruff` of this interpreter, on the text through a pipe,
with no configuration file read (`--isolated`): the result looks the same wherever it is reduced.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

LINE_LENGTH = 100


def ruff_available() -> bool:
    return importlib.util.find_spec("ruff") is not None


def formatted(text: str) -> str | None:
    """`text` formatted by ruff, or None when ruff is not installed or refuses it."""
    if not ruff_available():
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--isolated", "--line-length", str(LINE_LENGTH), "-"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None
