"""The starter archive: captured for real on torch 2.13.0, with the lines and reasons the triage recorded.

Each examples/starter/<id>/meta.toml lists the breaks a person observed
("8:... (gb0124 ...)"); the bundle in cases/ must hold exactly those script
lines with those graph-break ids. test_replay.py re-runs the archive live.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from casekit.archive.store import Archive

from .conftest import ROOT, STARTER

EXPECTATION = re.compile(r"^(?P<line>\d+):.*?\((?P<gb>gb\d{4})")
CASE_IDS = sorted(p.name for p in STARTER.iterdir() if (p / "meta.toml").exists())


def expected_breaks(entries: list[str]) -> dict[int, str]:
    found = {}
    for entry in entries:
        match = EXPECTATION.match(entry)
        if match:
            found[int(match["line"])] = match["gb"].upper()
    return found


def test_the_starter_archive_has_at_least_eight_seed_cases():
    assert len(CASE_IDS) >= 8
    assert sorted(Archive(ROOT / "cases").ids()) == CASE_IDS


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_starter_case_records_the_triaged_lines_and_reasons(case_id: str):
    meta = tomllib.loads((STARTER / case_id / "meta.toml").read_text())
    case = Archive(ROOT / "cases").load(case_id)
    assert case.title == meta["title"] and case.rollback_notes.strip() and case.notes.strip()
    assert case.environment["torch"].startswith("2.13.0")
    assert case.pre.source == (STARTER / case_id / "repro.py").read_text()
    assert case.post is not None and case.post.source == (STARTER / case_id / "fixed.py").read_text()
    for which, key in (("pre", "expect_pre"), ("post", "expect_post")):
        observation = case.observations[which]
        script = case.script(which)
        assert script is not None and observation.status.value == "ok"
        in_script = {s.line: s.gb_id for s in observation.sites if s.file == script.name}
        expected = expected_breaks(meta.get(key, []))
        assert {line: in_script.get(line) for line in expected} == expected, (which, in_script)
        assert set(in_script) <= set(expected), (
            f"{which}: unexpected breaks at {sorted(set(in_script) - set(expected))}"
        )
        assert observation.check.allclose is True
    assert case.observations["pre"].graphs > case.observations["post"].graphs or case_id == "shape-recompiles"
    if case_id == "shape-recompiles":  # recompiles, not breaks: kept apart
        assert len(case.observations["pre"].recompiles) > len(case.observations["post"].recompiles) == 0
