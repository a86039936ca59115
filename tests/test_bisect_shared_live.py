"""`casekit bisect` of several cases together on real torch (2.5.1 and 2.13.0): each case answers as alone."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.bisect_fakes import invoke

ROOT = Path(__file__).resolve().parent.parent
CASES = ("tensor-if", "print-in-forward")


@pytest.mark.slow
def test_shared_bisection_on_real_torch_matches_each_single_bisection(tmp_path: Path, torch251_python: str) -> None:
    archive = tmp_path / "cases"
    archive.mkdir()
    for case in CASES:
        shutil.copy(ROOT / "cases" / f"{case}.toml", archive / f"{case}.toml")
    common = [
        "--good",
        "2.5.1",
        "--bad",
        "2.13.0",
        "--python-for",
        f"2.5.1={torch251_python}",
        "--python-for",
        f"2.13.0={sys.executable}",
        "--archive",
        archive,
        "--timeout",
        "120",
    ]
    code, output, error = invoke(
        "bisect", *CASES, *common, "--cache", tmp_path / "shared.json", "--json", tmp_path / "m.json"
    )
    assert code == 0, (output, error)
    document = json.loads((tmp_path / "m.json").read_text())
    summary = document["summary"]
    assert (summary["rounds"], summary["batches"], summary["case_runs"]) == (2, 2, 4), summary
    shared = {doc["subject"]: doc for doc in document["reports"]}
    for case in CASES:
        code, output, error = invoke(
            "bisect", case, *common, "--cache", tmp_path / f"{case}.json", "--json", tmp_path / f"{case}.json.out"
        )
        assert code == 0, (output, error)
        alone = json.loads((tmp_path / f"{case}.json.out").read_text())
        together = shared[case]
        for field in ("first_bad", "last_good", "good_outcome", "bad_outcome", "result", "changes"):
            assert together[field] == alone[field], (case, field)
        assert [s["outcome"] for s in together["steps"]] == [s["outcome"] for s in alone["steps"]]
