"""Break identity across releases on real public-issue repros (tests/corpus/).

Fast: classify every case in six directions from the probe results recorded on torch 2.5.1,
2.13.0 and 2.14.1 against the classes written down before classifying (tests/corpus/expected.toml).
Slow: re-record a few cases for real on the three releases and classify the fresh runs.
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
PATTERNS = {str(n) for n in range(1, 8)} | {"gone+new", "renumbered", "helper", "def-use"}


def test_the_corpus_is_large_cites_its_sources_and_covers_every_pattern():
    expected = confusion.expected_classes()
    assert len(expected) >= 30
    for case, spec in expected.items():
        readme = (confusion.HERE / case / "README.md").read_text()
        assert "github.com/pytorch/pytorch/" in readme, case
        assert set(confusion.DIRECTIONS) <= set(spec), case
        for release in confusion.RELEASES:
            assert (confusion.HERE / case / "probe" / f"{release}.json").exists(), (case, release)
    assert PATTERNS <= {spec["pattern"] for spec in expected.values()}


def test_agreement_is_100_percent_over_every_pair_of_releases():
    rows = confusion.classify_corpus()
    per_pair = {pair: confusion.agreement(pair_rows) for pair, pair_rows in confusion.pairs(rows).items()}
    assert set(per_pair) == {("2.5.1", "2.13.0"), ("2.13.0", "2.14.1"), ("2.5.1", "2.14.1")}
    assert all(value == 100.0 for value in per_pair.values()), (per_pair, confusion.confusion_markdown(rows))


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


SAMPLE = [
    "contextmanager_exit_helper",
    "contextmanager_span_helper",
    "data_ptr_def_use",
    "distributions_validate",
    "functools_cached_property",
    "nn_layernorm_in_forward",
    "graph_break_try_finally",
    "set_stance_api",
    "sorted_lambda_key",
    "tolist_loop",
]


@pytest.mark.slow
def test_fresh_runs_on_three_releases_classify_as_expected(torch251_python, torch2141_python, tmp_path: Path):
    pythons = (sys.executable, torch251_python, torch2141_python)
    releases = {record.record(python, SAMPLE, tmp_path) for python in pythons}
    assert releases == set(confusion.RELEASES)
    for case in SAMPLE:
        (tmp_path / case / "repro.py").write_text((confusion.HERE / case / "repro.py").read_text())
    rows = confusion.classify_corpus(SAMPLE, fixtures=tmp_path)
    assert rows and [(r.case, r.direction, r.site, r.got) for r in rows if r.expected != r.got] == []
