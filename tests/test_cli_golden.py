"""Golden transcripts of the main read commands on a fixed archive (a real capture plus two replays).

Regenerate after an intended change of the output with CASEKIT_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os

import pytest

from .conftest import FIXTURES, run_casekit

ARCHIVE = FIXTURES / "report" / "archive"
GOLDEN = FIXTURES / "golden"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list", ["list"]),
        ("show-item-branch", ["show", "item-branch"]),
        ("show-logging-in-forward", ["show", "logging-in-forward"]),
        ("validate", ["validate"]),
    ],
)
def test_golden_transcript(name: str, args: list[str]):
    result = run_casekit(*args, "--archive", str(ARCHIVE))
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(ARCHIVE), "<archive>")
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_golden_merge_transcript():
    """`merge` renders with the one replay table (site classes in canonical order, not alphabetical)."""
    results = FIXTURES / "report" / "replay-torch-2.5.1.json"
    result = run_casekit("merge", str(results), "--fail-on", "never")
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(results.parent), "<fixtures>")
    golden = GOLDEN / "merge.txt"
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
