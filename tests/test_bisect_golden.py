"""Golden transcripts of `casekit bisect`: a regression, a fix, nothing changed, and a change that is not monotonic.

`run_target` is faked at its interface (canned observations per torch
version, classified for real, see test_bisect_releases_fast.py); each
bisection runs twice and the second, served from the cache, is the
transcript (so no timings). Regenerate after an intended change of the
output with CASEKIT_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from casekit.archive.store import Archive
from casekit.bisect import releases
from casekit.cli.bisect import register
from casekit.model import ScriptObservation, ScriptStatus
from tests.bisect_fakes import HISTORY, VERSIONS, FakeReplay, item_break, make_case, observed

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden"
COMPILE_ERROR = {"status": ScriptStatus.COMPILE_ERROR, "graphs": 0, "detail": "compiled run: RuntimeError: boom"}

# The recorded .item() break is fixed upstream in 2.8.0: the pre-fix compiles to one graph from then on.
FIXED_IN_280: dict[str, dict[str, ScriptObservation]] = {
    version: {
        "pre": observed(graphs=1) if version in ("2.8.0", "2.9.1", "2.10.0") else observed(item_break()),
        "post": observed(graphs=1),
    }
    for version in VERSIONS
}
# The break moves in 2.7.1 ("changed"), and only from 2.9.1 does the post-fix crash ("fix_broken").
TWO_CHANGES: dict[str, dict[str, ScriptObservation]] = {
    "2.5.1": {"pre": observed(item_break()), "post": observed(graphs=1)},
    "2.6.0": {"pre": observed(item_break()), "post": observed(graphs=1)},
    "2.7.1": {"pre": observed(item_break(line=6)), "post": observed(graphs=1)},
    "2.8.0": {"pre": observed(item_break(line=6)), "post": observed(graphs=1)},
    "2.9.1": {"pre": observed(item_break(line=6)), "post": observed(**COMPILE_ERROR)},  # type: ignore[arg-type]
    "2.10.0": {"pre": observed(item_break(line=6)), "post": observed(**COMPILE_ERROR)},  # type: ignore[arg-type]
}

SCENARIOS = {
    "bisect-regression": (HISTORY, "2.10.0"),
    "bisect-fix": (FIXED_IN_280, "2.10.0"),
    "bisect-nothing-changed": (HISTORY, "2.7.1"),
    "bisect-not-monotonic": (TWO_CHANGES, "2.10.0"),
}


def bisect_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[int, str, dict[str, object]]:
    history, bad = SCENARIOS[name]
    archive = tmp_path / "cases"
    Archive(archive).save(make_case())
    monkeypatch.setattr(releases, "run_target", FakeReplay(history))
    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    versions = ",".join(VERSIONS[: VERSIONS.index(bad) + 1])
    args = ["bisect", "item-case", "--good", "2.5.1", "--bad", bad, "--versions", versions]
    args += ["--archive", str(archive), "--cache", str(tmp_path / "cache.json"), "--json", str(tmp_path / "r.json")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, (first.output, first.exception)
    again = CliRunner().invoke(app, args)
    output = again.output[again.output.index("searched versions") :].replace(str(tmp_path), "<tmp>")
    return again.exit_code, output, json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_bisect_golden_transcript(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    code, text, _ = bisect_twice(tmp_path, monkeypatch, name)
    assert code == 0
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_the_json_says_what_the_text_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {
        "bisect-regression": ("regression", "2.8.0", True, True),
        "bisect-fix": ("fix", "2.8.0", True, True),
        "bisect-nothing-changed": ("nothing_changed", None, False, True),
        "bisect-not-monotonic": ("regression", "2.7.1", True, False),
    }
    for name, (result, first_bad, exact, monotonic) in expected.items():
        code, text, report = bisect_twice(tmp_path / name, monkeypatch, name)
        assert (report["result"], report["first_bad"], report["exact"], report["monotonic"]) == (
            result,
            first_bad,
            exact,
            monotonic,
        ), name
        assert bool(report["warnings"]) == (not monotonic) == ("warning: not monotonic" in text), name
