"""Sharding the case x target matrix and merging shard results (casekit.replay.shard, `casekit merge`)."""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from casekit.cli.records import register
from casekit.errors import CasekitError
from casekit.model import Severity
from casekit.outcome import FailOn
from casekit.replay.document import read_replay_document
from casekit.replay.shard import (
    ShardError,
    merge_reports,
    parse_shard,
    select_shard,
    shard_plan,
    without_volatile,
)

FIXTURE_ARCHIVE = Path(__file__).parent / "fixtures" / "report" / "archive"


def records_app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/4", (2, 4)), (" 4 / 4 ", (4, 4))])
def test_parse_shard_reads_k_of_n(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize(
    "text, words",
    [("0/4", "numbered from 1"), ("5/4", "between 1 and 4"), ("2", "K/N"), ("a/b", "K/N"), ("1/0", "at least 1")],
)
def test_parse_shard_rejects_clearly(text: str, words: str) -> None:
    with pytest.raises(ShardError, match=words):
        parse_shard(text)
    assert issubclass(ShardError, CasekitError)


# -------------------------------------------------------------- selection


def matrix(n_cases: int, n_targets: int) -> tuple[list[str], list[str]]:
    return [f"case-{i:02d}" for i in range(n_cases)], [f"venv:torch-2.{i}.0" for i in range(n_targets)]


@pytest.mark.parametrize("seed", range(30))
def test_shards_partition_the_matrix_into_rectangles(seed: int) -> None:
    rng = random.Random(seed)
    cases, labels = matrix(rng.randint(0, 12), rng.randint(1, 5))
    n = rng.randint(1, 9)
    plan = shard_plan(cases, labels, n)
    cells = [cell for shard in plan for cell in shard]
    assert sorted(cells) == sorted((c, t) for c in cases for t in labels)  # every cell exactly once
    for shard in plan:
        shard_cases = {c for c, _ in shard}
        shard_labels = {t for _, t in shard}
        # the CLI runs shard cases x shard targets: a rectangle wastes nothing
        assert shard == {(c, t) for c in shard_cases for t in shard_labels}


def test_selection_is_stable_whatever_the_input_order() -> None:
    cases, labels = matrix(7, 2)
    expected = [select_shard(cases, labels, k, 4) for k in range(1, 5)]
    for seed in range(10):
        rng = random.Random(seed)
        shuffled_cases, shuffled_labels = cases[:], labels[:]
        rng.shuffle(shuffled_cases)
        rng.shuffle(shuffled_labels)
        assert [select_shard(shuffled_cases, shuffled_labels, k, 4) for k in range(1, 5)] == expected


def test_more_targets_than_shards_deals_whole_targets() -> None:
    cases, labels = matrix(3, 5)
    first = select_shard(cases, labels, 1, 2)
    assert {t for _, t in first} == {labels[0], labels[2], labels[4]}
    assert {c for c, _ in first} == set(cases)


def test_one_target_splits_its_cases() -> None:
    cases, labels = matrix(5, 1)
    assert [len(select_shard(cases, labels, k, 2)) for k in (1, 2)] == [3, 2]
    assert select_shard(cases, labels, 6, 6) == set()  # more shards than cells: some are empty


# ------------------------------------------------------------------- merge


def result(case: str, target: str, severity: str = "info", verdict: str = "unchanged") -> dict[str, object]:
    return {
        "case": case,
        "target": target,
        "verdict": verdict,
        "severity": severity,
        "reasons": [],
        "scripts": {"pre": None, "post": None},
        "rollback": None,
    }


def document(shard: str | None, targets: list[str], results: list[dict[str, object]]) -> dict[str, object]:
    data: dict[str, object] = {
        "schema": "casekit.replay/1",
        "targets": [
            {
                "label": t,
                "torch": "2.13.0",
                "runner": "venv",
                "error": None,
                "warnings": [],
                "seconds": 1.5,
                "import_s": 2.0,
            }
            for t in targets
        ],
        "results": results,
    }
    if shard:
        data["shard"] = shard
    return data


def write(path: Path, data: dict[str, object]) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_merge_combines_shards_in_canonical_order(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.json", document("1/2", ["t2", "t1"], [result("b", "t2"), result("a", "t1", "warn", "changed")])
    )
    b = write(tmp_path / "b.json", document("2/2", ["t1"], [result("c", "t1")]))
    merged = merge_reports([a, b])
    assert [t.label for t in merged.data.targets] == ["t1", "t2"]
    assert [(r.target, r.case) for r in merged.data.results] == [("t1", "a"), ("t1", "c"), ("t2", "b")]
    assert merged.data.targets[0].seconds == 3.0  # a target split over shards: its time adds up
    assert merged.data.targets[0].import_s == 2.0  # the import of one shard: the largest, not the sum
    assert merged.worst is Severity.WARN
    assert merged.data.shards == ["1/2", "2/2"]
    assert merged.data.to_json()["shards"] == ["1/2", "2/2"] and "shard" not in merged.data.to_json()


def test_merge_refuses_a_missing_shard_unless_partial(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", document("1/3", ["t"], [result("a", "t")]))
    b = write(tmp_path / "b.json", document("3/3", ["t"], [result("c", "t")]))
    with pytest.raises(ShardError, match="missing shard.*2/3"):
        merge_reports([a, b])
    assert merge_reports([a, b], allow_partial=True).warnings


def test_merge_refuses_the_same_cell_twice(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", document(None, ["t"], [result("a", "t")]))
    b = write(tmp_path / "b.json", document(None, ["t"], [result("a", "t", "error", "regressed")]))
    with pytest.raises(ShardError, match="also in"):
        merge_reports([a, b])


def test_merge_names_the_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "casekit.report/1", "targets": [], "results": []}')
    with pytest.raises(CasekitError, match=r"bad\.json: field 'schema'"):
        merge_reports([bad])
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CasekitError, match=r"broken\.json: not valid JSON"):
        merge_reports([broken])


def test_an_environment_failure_is_an_error_verdict(tmp_path: Path) -> None:
    data = document(None, ["t"], [])
    data["targets"][0]["error"] = "cannot build venv"  # type: ignore[index]
    assert merge_reports([write(tmp_path / "a.json", data)]).worst is Severity.ERROR


@pytest.mark.parametrize(
    "worst, fail_on, expected",
    [
        ("error", "error", True),
        ("warn", "error", False),
        ("warn", "warn", True),
        ("info", "info", True),
        ("error", "never", False),
    ],
)
def test_fail_rule_matches_replay(worst: str, fail_on: str, expected: bool) -> None:
    assert FailOn(fail_on).reached_by(Severity(worst)) is expected


def test_merge_command_exit_codes_and_json(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", document("1/2", ["t"], [result("a", "t", "error", "fix_broken")]))
    b = write(tmp_path / "b.json", document("2/2", ["t"], []))
    runner = CliRunner()
    out = tmp_path / "merged.json"
    done = runner.invoke(records_app(), ["merge", str(a), str(b), "--json", str(out)])
    assert done.exit_code == 1, done.output
    assert "worst severity: error" in done.output and "fix_broken" in done.output
    assert json.loads(out.read_text())["results"][0]["case"] == "a"
    assert runner.invoke(records_app(), ["merge", str(a), str(b), "--fail-on", "never"]).exit_code == 0


# ------------------------------------------- a real replay, sharded and merged


@pytest.mark.slow
def test_sharded_replay_merged_equals_the_unsharded_replay(tmp_path: Path) -> None:
    """Two starter cases on two local targets: `replay --shard K/3` x 3, merged, equals one `replay`."""
    from casekit.cli import app as casekit_app

    archive = tmp_path / "cases"
    archive.mkdir()
    for case_id in ("item-branch", "print-in-forward"):
        shutil.copy(FIXTURE_ARCHIVE / f"{case_id}.toml", archive / f"{case_id}.toml")
    # the same interpreter under a second label: two targets, one torch. A venv's interpreter finds its
    # packages from where it is started, so the alias is the venv's folder, not its (resolved) binary
    if sys.prefix != sys.base_prefix:
        (tmp_path / "venv-alias").symlink_to(sys.prefix, target_is_directory=True)
        alias = tmp_path / "venv-alias" / Path(sys.executable).relative_to(sys.prefix)
    else:
        alias = tmp_path / "python-alias"
        alias.symlink_to(Path(sys.executable).resolve())
    targets = ["--python", sys.executable, "--python", str(alias)]
    common = ["--archive", str(archive), "--no-record", "--fail-on", "never", *targets]
    runner = CliRunner()
    whole = tmp_path / "whole.json"
    done = runner.invoke(casekit_app, ["replay", *common, "--json", str(whole)])
    assert done.exit_code == 0, done.output
    shards = []
    for k in (1, 2, 3):
        path = tmp_path / f"shard-{k}.json"
        done = runner.invoke(casekit_app, ["replay", *common, "--shard", f"{k}/3", "--json", str(path)])
        assert done.exit_code == 0, done.output
        shards.append(path)
    assert sorted(len(json.loads(p.read_text())["results"]) for p in shards) == [1, 1, 2]
    merged_path = tmp_path / "merged.json"
    done = runner.invoke(records_app(), ["merge", *map(str, shards), "--json", str(merged_path), "--fail-on", "never"])
    assert done.exit_code == 0, done.output
    unsharded = read_replay_document(whole)
    merged = read_replay_document(merged_path)
    assert len(merged.results) == 4
    assert without_volatile(merged) == without_volatile(unsharded)
    worst = max((r.severity for r in unsharded.results), key=lambda s: s.rank)
    assert merge_reports(shards).worst is worst


def test_the_same_slice_per_target_job_is_not_a_repeat(tmp_path: Path) -> None:
    """A CI matrix runs --shard K/N in one job per torch version: K/N repeats across targets."""
    paths = [
        write(tmp_path / f"{t}-{k}.json", document(f"{k}/2", [t], [result(f"case-{k}", t)]))
        for t in ("torch-2.12", "torch-2.13")
        for k in (1, 2)
    ]
    assert len(merge_reports(paths).data.results) == 4
    with pytest.raises(ShardError, match="missing shard.*2/2"):
        merge_reports(paths[:1] + paths[2:3])


def test_a_slice_of_the_same_matrix_twice_is_refused(tmp_path: Path) -> None:
    matrix = {"cases": ["a", "b"], "targets": ["t"]}
    one = document("1/2", ["t"], [result("a", "t")]) | {"matrix": matrix}
    two = document("2/2", ["t"], [result("b", "t")]) | {"matrix": matrix}
    paths = [
        write(tmp_path / "1.json", one),
        write(tmp_path / "1-again.json", document("1/2", ["t"], []) | {"matrix": matrix}),
        write(tmp_path / "2.json", two),
    ]
    with pytest.raises(ShardError, match="1/2 of the same matrix given more than once"):
        merge_reports(paths)


# -------------------------------------------- shards balanced by recorded cost


@pytest.mark.parametrize("seed", range(20))
def test_a_target_share_is_balanced_by_recorded_cost(seed: int) -> None:
    """Cases dealt dearest first onto the cheapest shard: no shard exceeds the mean by more than the
    dearest case (the LPT bound), and every cell still lands exactly once, in rectangles."""
    rng = random.Random(seed)
    cases, labels = matrix(rng.randint(20, 300), rng.randint(1, 3))
    costs = {case: rng.lognormvariate(0, 1) for case in cases}
    n = len(labels) * rng.randint(2, 6)
    plan = shard_plan(cases, labels, n, costs)
    assert sorted(cell for shard in plan for cell in shard) == sorted((c, t) for c in cases for t in labels)
    loads = [sum(costs[c] for c, _ in shard) for shard in plan]
    mean = sum(loads) / n
    assert max(loads) <= mean + max(costs.values()) + 1e-9
    for shard in plan:
        assert len({t for _, t in shard}) == 1  # fewer targets than shards: one target per shard


def test_the_cost_cut_is_the_same_whatever_order_the_costs_arrive_in() -> None:
    cases, labels = matrix(40, 2)
    costs = {case: (i * 7919 % 97) / 10 for i, case in enumerate(cases)}
    shuffled = dict(sorted(costs.items(), key=lambda item: random.Random(3).random()))
    assert shard_plan(cases, labels, 6, costs) == shard_plan(list(reversed(cases)), labels, 6, shuffled)


def test_a_case_without_recorded_times_costs_the_default() -> None:
    from casekit.replay.shard import DEFAULT_CASE_COST_S, case_cost

    assert case_cost({}, "a") == DEFAULT_CASE_COST_S
    assert case_cost({"a": float("nan")}, "a") == DEFAULT_CASE_COST_S
    assert case_cost({"a": -3.0}, "a") == DEFAULT_CASE_COST_S
    assert case_cost({"a": 2.5}, "a") == 2.5


def test_the_layout_names_the_shards_of_each_target() -> None:
    from casekit.replay.shard import shard_layout

    cases, labels = matrix(5, 2)
    assert shard_layout(shard_plan(cases, labels, 6)) == {labels[0]: [1, 2, 3], labels[1]: [4, 5, 6]}
    assert shard_layout(shard_plan(cases[:2], labels[:1], 3)) == {labels[0]: [1, 2]}  # shard 3: empty


# ------------------------------------------------- a results folder, by attempt


def sliced(
    shard: str,
    target: str,
    cases: list[str],
    layout: dict[str, list[int]],
    attempt: int = 1,
    written: str = "2026-12-01T10:00:00+00:00",
) -> dict[str, object]:
    """A per-target result file as `replay --results-dir` writes it."""
    data = document(shard, [target], [result(case, target) for case in cases])
    data |= {
        "layout": layout,
        "matrix": {"cases": ["a", "b", "c"], "targets": sorted(layout)},
        "attempt": attempt,
        "written": written,
    }
    return data


LAYOUT = {"t1": [1, 2], "t2": [3, 4]}


def results_folder(root: Path, skip: tuple[str, int] | None = None) -> Path:
    from casekit.replay.shard import result_file

    cells = {("t1", 1): ["a", "c"], ("t1", 2): ["b"], ("t2", 3): ["a", "c"], ("t2", 4): ["b"]}
    for (target, k), cases in cells.items():
        if (target, k) != skip:
            path = result_file(root, target, k, 4)
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path, sliced(f"{k}/4", target, cases, LAYOUT))
    return root


def test_merge_of_a_results_folder_reads_every_target_and_shard(tmp_path: Path) -> None:
    merged = merge_reports([results_folder(tmp_path / "results")])
    assert [(r.target, r.case) for r in merged.data.results] == [
        ("t1", "a"),
        ("t1", "b"),
        ("t1", "c"),
        ("t2", "a"),
        ("t2", "b"),
        ("t2", "c"),
    ]
    assert merged.retries == [] and "layout" not in merged.data.to_json() and "attempt" not in merged.data.to_json()


def test_a_missing_shard_of_a_folder_is_named_with_its_index(tmp_path: Path) -> None:
    folder = results_folder(tmp_path / "results", skip=("t2", 3))
    with pytest.raises(ShardError, match=r"missing shard 3/4 \(index 2\) on t2: no result file"):
        merge_reports([folder])
    partial = merge_reports([folder], allow_partial=True)
    assert len(partial.data.results) == 4 and partial.warnings


def test_a_target_with_no_file_at_all_is_named_when_expected(tmp_path: Path) -> None:
    from casekit.replay.shard import result_file

    folder = tmp_path / "results"
    for k, cases in ((1, ["a", "c"]), (2, ["b"])):  # a plan of its own per target (one Indexed Job each)
        path = result_file(folder, "t1", k, 2)
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, sliced(f"{k}/2", "t1", cases, {"t1": [1, 2]}))
    assert len(merge_reports([folder]).data.results) == 3
    with pytest.raises(ShardError, match="missing target t2: no result file of any of its shards"):
        merge_reports([folder], expected_targets=["t1", "t2"])


def test_the_latest_attempt_of_a_shard_wins_and_the_retry_is_reported(tmp_path: Path) -> None:
    from casekit.replay.shard import result_file

    folder = results_folder(tmp_path / "results")
    retried = result_file(folder, "t2", 4, 4)
    data = sliced("4/4", "t2", ["b"], LAYOUT, attempt=2, written="2026-12-01T11:00:00+00:00")
    data["results"][0]["verdict"] = "changed"  # type: ignore[index]
    write(retried, data)
    stale = tmp_path / "copied-from-a-node" / "t2" / "shard-4-of-4.json"  # an earlier attempt kept elsewhere
    stale.parent.mkdir(parents=True)
    write(stale, sliced("4/4", "t2", ["b"], LAYOUT, attempt=1))
    merged = merge_reports([folder, tmp_path / "copied-from-a-node"])
    assert {(r.target, r.case): r.verdict for r in merged.data.results}[("t2", "b")] == "changed"
    assert len(merged.retries) == 1
    assert merged.retries[0].startswith("shard 4/4 (index 3) on t2: kept attempt 2")
    assert "earlier: attempt 1 in" in merged.retries[0]


def test_a_shard_rewriting_its_file_counts_the_attempt_and_touches_no_other(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from casekit.replay.document import parse_replay_document
    from casekit.replay.plan import write_results_dir

    given = document("2/4", ["t1", "t2"], [result("a", "t1"), result("a", "t2")]) | {"layout": LAYOUT}
    doc = parse_replay_document(given, "the test's document")
    clock = iter([datetime(2026, 12, 1, 10, tzinfo=UTC), datetime(2026, 12, 1, 10, 1, tzinfo=UTC)] * 2)
    first = write_results_dir(doc, tmp_path, lambda: next(clock))  # type: ignore[arg-type]
    other = tmp_path / "other" / "shard-1-of-4.json"
    other.parent.mkdir()
    other.write_text("{}")
    second = write_results_dir(doc, tmp_path, lambda: next(clock))  # type: ignore[arg-type]
    assert first == second and len(first) == 2
    assert [json.loads(p.read_text())["attempt"] for p in second] == [2, 2]
    assert [json.loads(p.read_text())["targets"][0]["label"] for p in second] == ["t1", "t2"]
    assert other.read_text() == "{}"
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # atomic: nothing half-written


def test_merge_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match="no shard result files"):
        merge_reports([tmp_path])


def test_the_merge_command_reports_retries(tmp_path: Path) -> None:
    from casekit.replay.shard import result_file

    folder = results_folder(tmp_path / "results")
    write(result_file(folder, "t1", 2, 4), sliced("2/4", "t1", ["b"], LAYOUT, attempt=3))
    done = CliRunner().invoke(records_app(), ["merge", str(folder), "--fail-on", "never"])
    assert done.exit_code == 0, done.output
    assert "retried: shard 2/4 (index 1) on t1: kept attempt 3" in done.output
    missing = results_folder(tmp_path / "again", skip=("t1", 1))
    done = CliRunner().invoke(records_app(), ["merge", str(missing)])
    assert isinstance(done.exception, ShardError)  # casekit's main turns it into one line and exit 2
    assert "missing shard 1/4 (index 0) on t1: no result file" in str(done.exception)
