"""Break identity across releases on real public-issue repros (tests/corpus/).

Fast: classify every case in eight directions from the probe results recorded on torch 2.5.1,
2.13.0, 2.14.1 and 2.15.0 against the classes written down before classifying (tests/corpus/expected.toml).
Slow: re-record a few cases for real on the three releases and classify the fresh runs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from casekit.bundle import sha256_text
from casekit.classify import classify_case
from casekit.classify.attribution import Axes, attribute_changes, attributed, settings_axes
from casekit.model import Case, ScriptObservation, ScriptSource
from casekit.replay.document import result_entry
from casekit.report.text import observation_summary, result_text
from casekit.scrub import shorten

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "corpus"))
import confusion  # noqa: E402
import record  # noqa: E402

CASES = sorted(confusion.expected_classes())
PATTERNS = {str(n) for n in range(1, 8)} | {"gone+new", "renumbered", "helper", "def-use"}
# issue 31's patterns: subclass outputs, a helper under two entry points, a release's changed default, a caller
# falling back after its callee did, a tail that ran eagerly behind a skipped context manager
PATTERNS |= {"subclass-outputs", "two-entry-points", "changed-default", "caller-fallback", "tail-fallback"}
# and a library break that torch logs twice (a bare cut at the caller's line beside the library's own record)
PATTERNS |= {"library-logged-twice"}


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
    assert set(per_pair) == {("2.5.1", "2.13.0"), ("2.13.0", "2.14.1"), ("2.5.1", "2.14.1"), ("2.14.1", "2.15.0")}
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


def bare_counts() -> list[tuple[str, str, dict[str, int]]]:
    """(case, release, counts) of every bare run recorded: Dynamo's own counts of the script alone (bare.py)."""
    return [
        (path.parent.parent.name, path.stem, json.loads(path.read_text()))
        for path in sorted(confusion.HERE.glob("*/bare/*.json"))
    ]


def test_the_probe_counts_what_the_script_alone_compiles_on_every_recorded_release():
    """Observing changes nothing: casekit's graph and recompile counts of every corpus repro (its recorded
    probe result) equal the script's own, run with no casekit at all (tests/corpus/bare.py), on every release
    with a bare record: every release of the corpus, every case (a missing bare record fails, never agrees)."""
    counts = bare_counts()
    by_release: dict[str, set[str]] = {}
    for case, release, bare in counts:
        by_release.setdefault(release, set()).add(case)
        observed = confusion.observation(case, release)
        assert {"graphs": observed.graphs, "recompiles": len(observed.recompiles)} == bare, (case, release)
    assert set(by_release) == set(confusion.RELEASES)
    for release in confusion.RELEASES:
        assert by_release[release] == set(CASES), (release, set(CASES) - by_release[release])
    # the observer effect this guards against is in the corpus: a helper compiled alone and under a second
    # entry point (3 graphs, 0 recompiles alone; one counting backend per compile call made it 4 and 1)
    assert ("helper_two_entry_points", "2.5.1", {"graphs": 3, "recompiles": 0}) in counts


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
    # the probe's records only: this test classifies them (the bare counts, a torch import per script and
    # release, are checked against the stored records by test_the_probe_counts_what_the_script_alone_compiles...)
    releases = {record.record(python, SAMPLE, tmp_path, bare=False) for python in pythons}
    assert releases == {"2.5.1", "2.13.0", "2.14.1"}  # 2.15.0 is a ~3 GB download: its records are fixtures only
    for case in SAMPLE:
        (tmp_path / case / "repro.py").write_text((confusion.HERE / case / "repro.py").read_text())
    rows = confusion.classify_corpus(SAMPLE, fixtures=tmp_path, releases=tuple(sorted(releases)))
    assert rows and [(r.case, r.direction, r.site, r.got) for r in rows if r.expected != r.got] == []


# The corpus case whose break is in a library (transformers 4.47.1, recorded beside each release's torch).
LIBRARY_CASE, LIBRARY = "library_break_logged_twice", "transformers"


@pytest.mark.slow
def test_the_library_case_run_now_matches_its_record_where_the_library_release_does(tmp_path: Path):
    """The library case run now on this interpreter (the project venv: torch 2.13.0 and its own transformers).
    Beside the recorded transformers release its sites and counts are the record's; beside another release
    (5.x puts the getter's warning_once on another line) it is the same single break, in the same function of
    the same library file, at that release's line. Either way the probe counts what the script alone compiles."""
    release = record.record(sys.executable, [LIBRARY_CASE], tmp_path)
    assert release in confusion.RELEASES, f"no record of {LIBRARY_CASE} on torch {release}"
    (tmp_path / LIBRARY_CASE / "repro.py").write_text((confusion.HERE / LIBRARY_CASE / "repro.py").read_text())
    live = confusion.observation(LIBRARY_CASE, release, tmp_path)
    recorded = confusion.observation(LIBRARY_CASE, release)
    assert recorded.packages[LIBRARY] == "4.47.1" and live.packages.get(LIBRARY), live.packages
    if live.packages[LIBRARY] == recorded.packages[LIBRARY]:
        place = [(s.where(), s.function, s.category) for s in live.sites]
        assert place == [(s.where(), s.function, s.category) for s in recorded.sites]
    else:  # another release of the library: the same break, wherever that release's line is
        assert [(s.file, s.function, s.category) for s in live.sites] == [
            (s.file, s.function, s.category) for s in recorded.sites
        ]
    bare = json.loads((tmp_path / LIBRARY_CASE / "bare" / f"{release}.json").read_text())
    assert {"graphs": live.graphs, "recompiles": len(live.recompiles)} == bare == {"graphs": 2, "recompiles": 0}


# ------------------------------------------------------------------ a release's own defaults

# The Dynamo settings each release records, from real runs: a capture of specialize_float_default on torch
# 2.5.1 (the bundle's environment) and its plain replay on 2.13.0 (the replay JSON's target), both nothing set.
SETTINGS = confusion.HERE / "dynamo_settings"


def plain_replay(case: str, captured_on: str, replayed_on: str):
    """`case` captured on one release and replayed on another with nothing set, classified and attributed as
    a replay does (one target: no twin)."""
    source = (confusion.HERE / case / "repro.py").read_text()
    bundle = Case(
        id=case,
        title=case,
        pre=ScriptSource("repro.py", sha256_text(source), source),
        observations={"pre": confusion.observation(case, captured_on)},
    )
    result = classify_case(bundle, replayed_on, {"pre": confusion.observation(case, replayed_on)})
    axes = {r: Axes(r, {}, settings_axes(json.loads((SETTINGS / f"{r}.json").read_text()))) for r in SETTINGS_RELEASES}
    (said,) = attribute_changes(axes[captured_on], [("target", axes[replayed_on], result)]).values()
    return attributed(result, said)


SETTINGS_RELEASES = ("2.5.1", "2.13.0")


@pytest.mark.parametrize(("captured_on", "replayed_on"), [("2.5.1", "2.13.0"), ("2.13.0", "2.5.1")])
def test_a_plain_replay_names_a_moved_default_with_torch_and_never_says_cause_unknown(captured_on, replayed_on):
    """specialize_float defaults to True on 2.5.1 and False on 2.13; nobody set it. Every changed break of the
    corpus, replayed with nothing set, is torch's change naming the default that moved with it; no line says
    "cause unknown" (it did: "cause unknown: gone: setting specialize_float and torch all differ")."""
    changed = 0
    for case in CASES:
        result = plain_replay(case, captured_on, replayed_on)
        text = result_text(result_entry(result))
        assert "cause unknown" not in text and "differ from the recording" not in text, (case, text)
        for script in result.scripts.values():
            for pairing in script.sites:
                if pairing.site_class.value in ("moved", "gone", "new", "reappeared"):
                    changed += 1
                    assert pairing.axis == "torch", (case, pairing.axis, pairing.cause)
                    assert "specialize_float" in pairing.cause, (case, pairing.cause)
    assert changed >= 10, changed


def test_the_readme_changed_default_example_is_what_casekit_says():
    """The README's example (a real `casekit replay` of specialize_float_default captured on 2.5.1, on 2.13.0)."""
    result = plain_replay("specialize_float_default", "2.5.1", "2.13.0")
    line = (
        "pre: its changes (recompiles 6 -> 2) coincide with torch 2.5.1 -> 2.13.0 (its default specialize_float"
        " True -> False also changed), the only difference from the recording"
    )
    assert line in result.reasons, result.reasons
    assert line in (ROOT / "README.md").read_text().replace("\n  ", " ")


# ------------------------------------------------------------------ the messages a person reads

ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}|_id\([^()]*, \d{6,}\)")


def corpus_texts() -> list[tuple[str, str]]:
    """(where, text) of everything casekit prints about the corpus: each capture's summary and each
    replay's result, both directions, from the real probe results."""
    texts = []
    for case in CASES:
        source = (confusion.HERE / case / "repro.py").read_text()
        for release in ("2.5.1", "2.13.0"):
            texts.append(
                (f"{case} capture {release}", observation_summary("pre", confusion.observation(case, release)))
            )
        for direction, (captured_on, replayed_on) in confusion.DIRECTIONS.items():
            bundle = Case(
                id=case,
                title=case,
                pre=ScriptSource("repro.py", sha256_text(source), source),
                observations={"pre": confusion.observation(case, captured_on)},
            )
            result = classify_case(bundle, replayed_on, {"pre": confusion.observation(case, replayed_on)})
            texts.append((f"{case} {direction}", result_text(result_entry(result))))
    return texts


def test_the_corpus_messages_carry_no_address_and_no_cut_bracket():
    texts = corpus_texts()
    raw = " ".join(json.dumps(json.loads(p.read_text())) for p in confusion.HERE.glob("*/probe/*.json"))
    assert ADDRESS.search(raw), "control: the corpus's raw Dynamo text holds addresses"
    for where, text in texts:
        assert not ADDRESS.search(text), (where, ADDRESS.search(text))
    reasons = {s.reason for c in CASES for r in ("2.5.1", "2.13.0") for s in confusion.observation(c, r).sites}
    for reason in reasons:  # every cut of every real reason closes what it opened
        for limit in range(12, 90, 3):
            short = shorten(reason, limit)
            assert len(short) <= limit and not _unbalanced(short), (reason, limit, short)


def _unbalanced(text: str) -> bool:
    depth = {"(": 0, "[": 0, "{": 0}
    for opener, closer in ("()", "[]", "{}"):
        depth[opener] = text.count(opener) - text.count(closer)
    return any(depth.values())


def test_a_changed_reason_is_said_once_and_a_capture_compares_nothing():
    changed = 0
    for where, text in corpus_texts():
        for line in text.splitlines():
            if "[reason changed:" in line:
                changed += 1
                shown, note = line.split("[reason changed:", 1)
                reason = shown.split(maxsplit=3)[-1].strip().rstrip("…")
                assert reason not in note, (where, line)  # the note names the ids and the old reason only
            if " capture " in where:
                assert "now falls back" not in line and "no longer" not in line, (where, line)
    assert changed >= 4  # ctxmgr_assert, fstring_debug_log, datetime_now, two_skipped_functions


def test_a_post_fix_that_did_not_compile_is_not_said_to_have_no_breaks():
    """set_stance_api on 2.5.1 cannot run (the release lacks torch.compiler.set_stance, so the eager baseline
    fails too): its post-fix (recorded clean on 2.13) shows nothing, and the line says nothing ran, not that a
    compiled run stopped."""
    source = (confusion.HERE / "set_stance_api" / "repro.py").read_text()
    recorded = confusion.observation("set_stance_api", "2.13.0")
    fixed = ScriptObservation(recorded.status, graphs=1)  # the fix: one graph, no break
    bundle = Case(
        id="set_stance_api",
        title="set_stance",
        pre=ScriptSource("repro.py", sha256_text(source), source),
        post=ScriptSource("repro_fixed.py", sha256_text(source), source),
        observations={"pre": recorded, "post": fixed},
    )
    ran = confusion.observation("set_stance_api", "2.5.1")
    text = result_text(result_entry(classify_case(bundle, "2.5.1", {"pre": ran, "post": ran})))
    assert "post: no breaks" not in text
    # nothing ran at all (the eager run failed too): never "its compiled run did not finish"
    assert "post: no break observed (unobserved: nothing ran)" in text
    assert "this release lacks torch.compiler.set_stance" in text
    assert "did not finish" not in text
