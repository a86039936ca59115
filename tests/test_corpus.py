"""Break identity across releases on real public-issue repros (tests/corpus/).

Fast: classify every case in both directions from the probe results recorded on torch 2.5.1
and 2.13.0 against the classes written down before classifying (tests/corpus/expected.toml).
Slow: re-record a few cases for real on both releases and classify the fresh runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "corpus"))
import confusion  # noqa: E402
import record  # noqa: E402

CASES = sorted(confusion.expected_classes())
PATTERNS = {str(n) for n in range(1, 8)} | {"gone+new"}


def test_the_corpus_is_large_cites_its_sources_and_covers_every_pattern():
    expected = confusion.expected_classes()
    assert len(expected) >= 20
    for case in expected:
        readme = (confusion.HERE / case / "README.md").read_text()
        assert "github.com/pytorch/pytorch/" in readme, case
        for release in ("2.5.1", "2.13.0"):
            assert (confusion.HERE / case / "probe" / f"{release}.json").exists(), (case, release)
    assert PATTERNS <= {spec["pattern"] for spec in expected.values()}


def test_agreement_is_at_least_95_percent():
    rows = confusion.classify_corpus()
    assert confusion.agreement(rows) >= 95.0, confusion.confusion_markdown(rows)


@pytest.mark.parametrize("case", CASES)
def test_every_disagreement_is_explained(case):
    why = confusion.explanations()
    for row in confusion.classify_corpus([case]):
        if row.expected != row.got:
            assert f"{row.case}/{row.direction}/{row.site}" in why, row


@pytest.mark.parametrize("case", [c for c in CASES if confusion.expected_classes()[c]["pattern"] != "control"])
def test_each_pattern_case_classifies_right_in_both_directions(case):
    wrong = [r for r in confusion.classify_corpus([case]) if r.expected != r.got]
    assert not wrong, wrong


def test_docs_identity_is_regenerated():
    assert (ROOT / "docs" / "identity.md").read_text() == confusion.document(), "run `make identity`"


SAMPLE = ["graph_break_try_finally", "set_stance_api", "sorted_lambda_key", "tolist_loop"]


@pytest.mark.slow
def test_fresh_runs_on_both_releases_classify_as_expected(torch251_python, tmp_path: Path):
    releases = {record.record(sys.executable, SAMPLE, tmp_path), record.record(torch251_python, SAMPLE, tmp_path)}
    assert releases == {"2.13.0", "2.5.1"}
    for case in SAMPLE:
        (tmp_path / case / "repro.py").write_text((confusion.HERE / case / "repro.py").read_text())
    rows = confusion.classify_corpus(SAMPLE, fixtures=tmp_path)
    assert rows and [(r.case, r.direction, r.site, r.got) for r in rows if r.expected != r.got] == []
