"""`casekit import`: TORCH_TRACE folders and TORCH_LOGS output of real runs become draft cases.

The recorded runs (tests/fixtures/import, see its README) are of the starter
repros; the bundles in tests/fixtures/report/archive are `casekit capture` of the
same scripts, so a draft's sites must be the sites capture recorded.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from casekit.archive.store import Archive
from casekit.bundle import case_to_toml, load_case, parse_case
from casekit.cli.records import register
from casekit.importer import (
    PLACEHOLDER_NAME,
    DraftImportError,
    import_runs,
    log_records,
    save_drafts,
    split_exception,
)
from casekit.model import Case, Recompile, ScriptRole, Site
from casekit.observe.logs import source_name
from casekit.scrub import Replacement, Scrubber

HERE = Path(__file__).parent
RUNS = HERE / "fixtures" / "import"
CAPTURED = HERE / "fixtures" / "report" / "archive"
STARTERS = sorted(p.name for p in (RUNS / "torch-2.13.0").iterdir() if p.is_dir())
WITH_TRACE = sorted(p.name for p in (RUNS / "torch-2.13.0").iterdir() if (p / "trace").is_dir())
REPO = HERE.parent


def site_keys(sites: list[Site]) -> list[tuple[str, int, str]]:
    return sorted((s.file, s.line, s.category) for s in sites)


def recompile_keys(recompiles: list[Recompile]) -> list[tuple[str, str, int]]:
    return sorted((r.function, r.file, r.line) for r in recompiles)


def captured(name: str) -> Case:
    return load_case(CAPTURED / f"{name}.toml")


def drafted_sites(drafts: list[Case]) -> list[Site]:
    """Every site of every draft, once (a site belongs to exactly one draft)."""
    return [site for case in drafts for site in case.observations["pre"].sites]


def records_app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


# ------------------------------------------------- recorded runs vs capture


@pytest.mark.parametrize("name", STARTERS)
def test_log_import_finds_the_sites_capture_found(name: str) -> None:
    result = import_runs(None, [RUNS / "torch-2.13.0" / name / "graph_breaks.log"])
    pre = captured(name).observations["pre"]
    assert site_keys(drafted_sites(result.drafts)) == site_keys(pre.sites)
    assert recompile_keys(result.recompiles) == recompile_keys(pre.recompiles)
    assert result.drafts, "every starter breaks or recompiles"


@pytest.mark.parametrize("name", WITH_TRACE)
def test_trace_import_finds_the_sites_capture_found(name: str) -> None:
    result = import_runs(RUNS / "torch-2.13.0" / name / "trace", [])
    pre = captured(name).observations["pre"]
    assert site_keys(drafted_sites(result.drafts)) == site_keys(pre.sites)
    assert recompile_keys(result.recompiles) == recompile_keys(pre.recompiles)
    assert all(case.environment["torch"] == "2.13.0+cpu" for case in result.drafts)
    assert all(len(case.environment["torch_git"]) == 40 for case in result.drafts)


def test_library_breaks_belong_to_the_user_line_that_called_them() -> None:
    result = import_runs(
        RUNS / "torch-2.13.0" / "logging-in-forward" / "trace",
        [RUNS / "torch-2.13.0" / "logging-in-forward" / "graph_breaks.log"],
    )
    assert [case.id for case in result.drafts] == ["repro-16-gb0291"]  # one logger.info line: one draft, 6 sites
    draft = result.drafts[0]
    sites = draft.observations["pre"].sites
    assert len(sites) == 6 and {s.anchor.where() for s in sites} == {"repro.py:16"}
    assert all(sorted(s.sources) == ["log", "trace"] for s in sites)  # both inputs, de-duplicated
    assert draft.title.startswith("logging.Logger method not supported for non-export cases at repro.py:16 (forward)")


def test_group_by_site_gives_one_draft_per_site() -> None:
    result = import_runs(None, [RUNS / "torch-2.13.0" / "logging-in-forward" / "graph_breaks.log"], group="site")
    assert len(result.drafts) == 6


def test_recompiles_without_breaks_still_make_a_draft() -> None:
    result = import_runs(None, [RUNS / "torch-2.13.0" / "shape-recompiles" / "graph_breaks.log"])
    (draft,) = result.drafts
    assert draft.tags == ["draft", "recompiles"]
    assert draft.title == "normalize recompiles 2 time(s) (repro.py:6)"
    assert draft.observations["pre"].sites == []


def test_trace_records_inputs_and_compile_time_in_the_notes() -> None:
    (draft,) = import_runs(RUNS / "torch-2.13.0" / "item-branch" / "trace", []).drafts
    assert "x: f32[4, 8] cpu" in draft.notes and "w: f32[8, 8] cpu" in draft.notes
    assert "Compile time of step" in draft.notes


# ------------------------------------------------------------ old releases


def test_a_torch_2_5_log_gives_the_categories_capture_gives_on_2_13() -> None:
    """2.5.1 prints `Graph break: from user code at:` and the reason only in the exception."""
    for name in ("item-branch", "metrics-disable"):
        result = import_runs(None, [RUNS / "torch-2.5.1" / name / "graph_breaks.log"])
        assert site_keys(drafted_sites(result.drafts)) == site_keys(captured(name).observations["pre"].sites)
    logging_result = import_runs(None, [RUNS / "torch-2.5.1" / "logging-in-forward" / "graph_breaks.log"])
    assert [s.where() for s in drafted_sites(logging_result.drafts)] == ["repro.py:16"]


def test_a_trace_before_2_6_says_where_to_look_instead() -> None:
    result = import_runs(RUNS / "torch-2.5.1" / "item-branch" / "trace", [])
    assert any("no dynamo_graph_break_reason records" in w and "step: Tensor.item" in w for w in result.warnings)


# ---------------------------------------------------------------- parsing


def test_log_records_strip_glog_prefixes_and_group_lines() -> None:
    text = (
        "V1129 22:11:59.808000 3181 site-packages/torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks] Graph break in user code at /x/a.py:3\n"
        "V1129 22:11:59.808000 3181 site-packages/torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks] Graph Break Reason: boom\n"
        "W1129 22:11:59.900000 3181 site-packages/torch/_dynamo/variables/tensor.py:1759] [0/0] an untagged warning\n"
        "[rank1]:V1129 22:12:00.000000 3181 site-packages/torch/_dynamo/guards.py:5396] [1/1] [__recompiles] Recompiling function f in /x/a.py:1\n"
    )
    assert log_records(text) == [
        ("graph_breaks", "Graph break in user code at /x/a.py:3\nGraph Break Reason: boom"),
        ("recompiles", "Recompiling function f in /x/a.py:1"),
    ]


def test_split_exception_takes_the_reason_out_of_a_traceback() -> None:
    message = 'Graph break: from user code at:\n  File "a.py", line 8, in step\nTraceback (most recent call last):\n  File "t.py", line 1, in w\n    x\ntorch._dynamo.exc.Unsupported: Tensor.item\n'
    head, exc_type, exc_message = split_exception(message)
    assert head.strip().endswith("in step") and exc_type == "Unsupported" and exc_message == "Tensor.item"


def test_unreadable_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DraftImportError, match="no dedicated_log_torch_trace"):
        import_runs(tmp_path, [])
    plain = tmp_path / "train.log"
    plain.write_text("epoch 1 loss 0.3\n")
    with pytest.raises(DraftImportError, match="TORCH_LOGS=graph_breaks,recompiles"):
        import_runs(None, [plain])
    with pytest.raises(DraftImportError, match="--trace DIR"):
        import_runs(None, [])


# ------------------------------------------------------------------ drafts


def test_a_draft_is_a_valid_bundle_that_says_what_it_lacks() -> None:
    (draft,) = import_runs(None, [RUNS / "torch-2.13.0" / "item-branch" / "graph_breaks.log"]).drafts
    assert draft.tags == ["draft"]
    assert draft.pre.name == PLACEHOLDER_NAME
    assert "Still needed" in draft.notes and "scripts.pre" in draft.notes and "casekit capture" in draft.notes
    again = parse_case(case_to_toml(draft))  # round-trips through the bundle format, hashes checked
    assert again.observations["pre"].sites[0].gb_id == "GB0124"
    namespace: dict[str, object] = {}
    with pytest.raises(NotImplementedError, match="draft: needs a minimal repro"):
        exec(compile(draft.pre.source, PLACEHOLDER_NAME, "exec"), namespace)


def test_import_command_files_drafts_once(tmp_path: Path) -> None:
    archive = tmp_path / "cases"
    log = RUNS / "torch-2.13.0" / "metrics-disable" / "graph_breaks.log"
    runner = CliRunner()
    dry = runner.invoke(records_app(), ["import", "--log", str(log), "--archive", str(archive), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "2 distinct site(s)" in dry.output and not archive.exists()
    done = runner.invoke(records_app(), ["import", "--log", str(log), "--archive", str(archive)])
    assert done.exit_code == 0, done.output
    assert Archive(archive).ids() == ["repro-10-gb0124", "repro-9-gb0124"]
    again = runner.invoke(records_app(), ["import", "--log", str(log), "--archive", str(archive)])
    assert again.exit_code == 0, again.output
    assert "already archived as repro-9-gb0124" in again.output and "0 draft(s)" in again.output


def test_import_skips_breaks_a_real_case_already_holds(tmp_path: Path) -> None:
    archive = tmp_path / "cases"
    archive.mkdir()
    shutil.copy(CAPTURED / "item-branch.toml", archive / "item-branch.toml")
    result = import_runs(
        None, [RUNS / "torch-2.13.0" / "item-branch" / "graph_breaks.log"], Archive(archive).load_all()
    )
    assert result.drafts == []
    assert result.skipped == ["repro.py:8 (GB0124): already archived as item-branch"]


# ------------------------------------------------------------- a live run


@pytest.mark.slow
def test_a_fresh_run_imports_to_what_capture_finds(tmp_path: Path) -> None:
    """Run a starter for real with TORCH_TRACE and TORCH_LOGS, import both, and capture the same script."""
    from casekit.capture import CaptureRequest, capture
    from casekit.runners.interface import TargetSpec
    from casekit.runners.registry import make_runner

    script = tmp_path / "repro.py"
    shutil.copy(REPO / "examples" / "starter" / "metrics-disable" / "repro.py", script)
    env = {
        **os.environ,
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCH_LOGS": "graph_breaks,recompiles",
        "TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:eager",  # inductor's codegen adds nothing to graph breaks
    }
    with open(tmp_path / "graph_breaks.log", "w") as stderr:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, stderr=stderr, stdout=subprocess.DEVNULL, timeout=600
        )
    assert done.returncode == 0
    result = import_runs(tmp_path / "trace", [tmp_path / "graph_breaks.log"])

    case = capture(
        CaptureRequest(script=script, case_id="live", fullgraph=False),
        make_runner(TargetSpec(runner="python")),
        Archive(tmp_path / "cases"),
        lambda _: None,
    )
    pre = case.observations["pre"]
    assert site_keys(drafted_sites(result.drafts)) == site_keys(pre.sites)
    assert recompile_keys(result.recompiles) == recompile_keys(
        pre.recompiles
    )  # once, though log and trace both report them
    assert all(sorted(s.sources) == ["log", "trace"] for s in drafted_sites(result.drafts))


def test_a_modules_inputs_are_named_as_its_code_names_them() -> None:
    """The trace says `L['self']._modules['up']._parameters['weight']`; the draft says `self.up.weight`."""
    (draft,) = import_runs(RUNS / "torch-2.13.0" / "module-break" / "trace", []).drafts
    [inputs] = [line for line in draft.notes.splitlines() if line.startswith("Inputs the compiler saw")]
    for name in (
        "self.up.weight: f32[32, 16] cpu",
        "self.up.bias: f32[32] cpu",
        "self.norm.weight",
        "x: f32[2, 5, 16] cpu",
    ):
        assert name in inputs, inputs
    assert "_modules" not in inputs and "']" not in inputs and "['" not in inputs


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("L['self']._modules['fc']._parameters['weight']", "self.fc.weight"),
        (
            "L['self']._modules['blocks']._modules['0']._buffers['running_mean']",
            "self.blocks[0].running_mean",
        ),
        ("L['self']._modules['norm']._buffers['running_mean']", "self.norm.running_mean"),
        ("L['args'][0]", "args[0]"),
        ("L['batch']['input_ids']", "batch['input_ids']"),
        ("G['CONFIG'].scale", "CONFIG.scale"),
        ("L['x'].size()[0]", "L['x'].size()[0]"),  # a call: kept as torch wrote it, not half-translated
        ("___as_tensor(L['___stack0'])", "___as_tensor(L['___stack0'])"),
    ],
)
def test_a_guard_source_reads_as_python_or_stays_whole(source: str, name: str) -> None:
    assert source_name(source) == name


def test_a_shared_draft_holds_no_part_of_the_recording_folder(tmp_path: Path) -> None:
    """torch cuts the script's path on the left in a guard's source comment (`mp/fx/item-branch/repro.py:9`,
    the recording was in /tmp/fx/item-branch): neither the whole folder nor a tail of it reaches the bundle."""
    trace = RUNS / "torch-2.13.0" / "item-branch" / "trace"
    raw = gzip.decompress(next(trace.glob("*.gz")).read_bytes()).decode()
    assert "# mp/fx/item-branch/repro.py:9" in raw  # control: the recorded trace holds the cut path
    result = import_runs(trace, [])
    store = Archive(tmp_path / "cases")
    [path] = save_drafts(store, result)
    text = path.read_text()
    assert "fx/item-branch" not in text and "mp/fx" not in text and "/tmp" not in text, text
    [recompile] = result.drafts[0].observations[ScriptRole.PRE].recompiles
    assert recompile.reasons == ["1/0: ___stack0 == 6.578796863555908"]  # the guard itself, as a log import gives it


def test_a_left_cut_tail_of_a_folder_given_with_its_separator_is_scrubbed() -> None:
    """The scrubber knows a folder by its name however it was given: '/tmp/fx/item-branch/' too."""
    scrubbed = Scrubber([Replacement("/tmp/fx/item-branch/", "")]).text("# mp/fx/item-branch/repro.py:9 in step")
    assert scrubbed == "# repro.py:9 in step"
