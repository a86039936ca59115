"""Replay end to end, for real: capture on one release, replay on another, read the verdicts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.capture import CaptureRequest, capture
from casekit.errors import RunnerError
from casekit.model import SiteClass
from casekit.replay.document import replay_document
from casekit.replay.run import ReplayOptions, replay
from casekit.runners.interface import BatchSession, TargetSpec
from casekit.runners.registry import make_runner

from .conftest import ROOT, run_casekit

VERSIONS = ROOT / "examples" / "versions"
quiet = lambda message: None  # noqa: E731


def capture_folder(archive: Archive, folder: Path, python: str | None = None) -> None:
    runner = make_runner(TargetSpec(runner="python", python=python))
    for case_dir in sorted(folder.iterdir()):
        if (case_dir / "repro.py").exists():
            request = CaptureRequest(
                script=case_dir / "repro.py",
                fixed=case_dir / "fixed.py",
                case_id=case_dir.name,
                title=case_dir.name,
                rollback_notes=f"rollback notes of {case_dir.name}",
                fullgraph=False,
            )
            capture(request, runner, archive, quiet)


def classes(result, which: str = "pre") -> list[str]:
    return sorted(p.site_class.value for p in result.scripts[which].sites)


@pytest.fixture(scope="module")
def starter_copy(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("archive")
    for bundle in (ROOT / "cases").glob("*.toml"):
        shutil.copy(bundle, target / bundle.name)
    return target


@pytest.mark.slow
def test_make_run_equivalent_replays_the_starter_archive_unchanged(starter_copy: Path, tmp_path: Path):
    out = tmp_path / "replay.json"
    result = run_casekit("replay", "--archive", str(starter_copy), "--no-record", "--json", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    validate_replay_json(data)
    assert len(data["results"]) == len(list(starter_copy.glob("*.toml"))) >= 8
    assert {r["verdict"] for r in data["results"]} == {"unchanged"}
    assert "item-branch" in result.stdout and "persists" in result.stdout


def validate_replay_json(data: dict) -> None:
    """The casekit.replay/1 shape from the issue, key by key."""
    assert data["schema"] == "casekit.replay/1"
    for target in data["targets"]:
        assert {"label", "torch", "cuda", "python", "runner"} <= set(target)
        assert target["runner"] in ("python", "venv", "docker")
    for result in data["results"]:
        assert {"case", "target", "verdict", "severity", "scripts", "rollback"} <= set(result)
        assert result["severity"] in ("error", "warn", "info")
        assert set(result["scripts"]) == {"pre", "post"}
        for script in filter(None, result["scripts"].values()):
            assert script["status"] in (
                "ok",
                "eager_failed",
                "compile_error",
                "mismatch",
                "timeout",
                "crashed",
                "env_failed",
            )
            assert isinstance(script["graphs"], int) and isinstance(script["recompiles"], int)
            assert isinstance(script["fallback_frames"], list)
            for site in script["sites"]:
                assert site["class"] in ("persists", "moved", "gone", "reappeared", "new", "unobserved")
                for side in ("observed", "recorded"):
                    if site[side] is not None:
                        assert {"file", "line", "function", "source", "gb_id", "reason"} <= set(site[side])
        if result["rollback"] is not None:
            assert {"needed", "verified", "detail", "notes"} <= set(result["rollback"])


@pytest.mark.slow
def test_exit_codes_and_history(starter_copy: Path, tmp_path: Path):
    archive = tmp_path / "a"
    archive.mkdir()
    shutil.copy(starter_copy / "print-in-forward.toml", archive)
    before = (archive / "print-in-forward.toml").read_text()
    fail_on_info = run_casekit(
        "replay", "--archive", str(archive), "--record", "--fail-on", "info", "--json", str(tmp_path / "r.json")
    )
    assert fail_on_info.returncode == 1  # info reached: the JSON is still written
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["severity"] == "info"
    after = Archive(archive).load("print-in-forward")
    assert len(after.replays) == 1 and after.replays[0].verdict == "unchanged"
    assert (archive / "print-in-forward.toml").read_text() != before
    usage = run_casekit("replay", "--archive", str(archive), "--fail-on", "sometimes")
    assert usage.returncode == 2 and "fail-on" in usage.stderr
    missing = run_casekit("replay", "--archive", str(archive), "--python", "/no/such/python", "--no-record")
    assert missing.returncode == 2  # an environment problem: exit 2, with one clear line
    assert "casekit: error: 1 target(s) could not run: python:/no/such/python" in missing.stderr
    assert "environment failed" in missing.stdout


def test_interrupted_replay_leaves_every_bundle_untouched(starter_copy: Path, tmp_path: Path):
    archive_dir = tmp_path / "a"
    shutil.copytree(starter_copy, archive_dir)
    before = {p.name: p.read_bytes() for p in archive_dir.glob("*.toml")}
    archive = Archive(archive_dir)

    class Interrupted:
        def __init__(self, spec):
            self.spec = spec

        def prepare(self, progress):
            pass

        def run_probe(self, jobs, progress):
            raise KeyboardInterrupt

        def open_session(self, entry, **options):  # a session per batch: the interrupt comes from this batch
            return BatchSession(self, entry)

        def describe(self):
            return {"runner": "python"}

    with pytest.raises(KeyboardInterrupt):
        replay(archive.load_all(), [TargetSpec(runner="python")], ReplayOptions(), archive, Interrupted, quiet)
    assert {p.name: p.read_bytes() for p in archive_dir.glob("*.toml")} == before
    assert not list(archive_dir.glob(".*.tmp"))


def test_runner_failure_is_env_failed_not_a_crash(starter_copy: Path):
    class Broken:
        def __init__(self, spec):
            self.spec = spec

        def prepare(self, progress):
            raise RunnerError("image casekit-replay:x cannot be built: network down")

        def describe(self):
            return {"runner": "docker"}

    cases = Archive(starter_copy).load_all(["tensor-if"])
    report = replay(cases, [TargetSpec(runner="docker", torch="9.9")], ReplayOptions(record=False), None, Broken, quiet)
    [result] = report.results
    assert result.verdict == "env_failed" and result.scripts["pre"].status.value == "env_failed"
    assert report.targets[0].error and "network down" in report.targets[0].error
    validate_replay_json(replay_document(report).to_json())


@pytest.mark.slow
@pytest.mark.torch251
def test_capture_on_2_5_1_replay_on_2_13_0(torch251_python: str, tmp_path: Path):
    archive = Archive(tmp_path / "arch")
    capture_folder(archive, VERSIONS, python=torch251_python)
    report = replay(
        archive.load_all(), [TargetSpec(runner="python")], ReplayOptions(record=True), archive, make_runner, quiet
    )
    results = {r.case_id: r for r in report.results}
    validate_replay_json(replay_document(report).to_json())
    # the break moves into copy.py below the same script line: moved, not gone + new
    deepcopy = results["deepcopy-moves"]
    assert classes(deepcopy) == ["moved"]
    [moved] = deepcopy.scripts["pre"].sites
    assert moved.observed.file == "copy.py" and moved.observed.anchor.where() == moved.recorded.where()
    # a torch.cond fix that held on 2.5.1 breaks on 2.13.0; the way back is proven
    cond = results["cond-identity-branch"]
    assert cond.verdict == "fix_broken" and cond.severity.value == "error"
    assert cond.rollback.needed and cond.rollback.verified is True
    assert cond.rollback.path == "pre-fix with fullgraph=False" and cond.rollback.notes
    # a function that compiled with a break now falls back to eager entirely: a warning
    fallback = results["any-generator-fallback"]
    assert fallback.severity.value == "warn" and fallback.scripts["pre"].new_fallbacks
    # a frame that fell back to eager on 2.5.1 compiles on 2.13.0: the workaround may be removable
    scope = results["contextmanager-scope"]
    assert scope.verdict == "improved" and SiteClass.GONE.value in classes(scope)
    assert any("workaround may be removable" in n for n in scope.scripts["pre"].notes)
    # a break that did not exist on 2.5.1 appears on 2.13.0
    assert classes(results["tolist-int-appears"]) == ["new"]
    # history was appended: a second replay still reads the bundles
    assert all(len(case.replays) == 1 for case in archive.load_all())


@pytest.mark.slow
@pytest.mark.torch251
def test_starter_archive_captured_on_2_13_0_replayed_on_2_5_1(torch251_python: str, starter_copy: Path):
    cases = Archive(starter_copy).load_all()
    report = replay(
        cases,
        [TargetSpec(runner="python", python=torch251_python)],
        ReplayOptions(record=False),
        None,
        make_runner,
        quiet,
    )
    results = {r.case_id: r for r in report.results}
    assert report.targets[0].environment["torch"].startswith("2.5.1")
    # reworded in every case, yet the same breaks: persists, never gone + new
    for case_id in ("item-branch", "tensor-if", "print-in-forward", "numpy-tolist", "nonzero-dynamic", "module-break"):
        assert classes(results[case_id]) == ["persists"], (case_id, results[case_id].reasons)
        assert results[case_id].scripts["post"].status.value == "ok"
    # 2.13 traces into logging/__init__.py; 2.5.1 stops at the script line: those library breaks are gone
    logging_case = results["logging-in-forward"]
    assert SiteClass.PERSISTS.value in classes(logging_case) and SiteClass.NEW.value not in classes(logging_case)


@pytest.mark.slow
@pytest.mark.torch251
def test_cli_matrix_of_managed_targets(torch251_python: str, starter_copy: Path, tmp_path: Path):
    """`casekit replay --torch 2.5.1 --torch 2.13.0`: two cached venvs, side by side, one table each."""
    archive = tmp_path / "a"
    archive.mkdir()
    for case_id in ("tensor-if", "print-in-forward"):
        shutil.copy(starter_copy / f"{case_id}.toml", archive)
    out = tmp_path / "matrix.json"
    result = run_casekit(
        "replay", "--archive", str(archive), "--torch", "2.5.1", "--torch", "2.13.0", "--no-record", "--json", str(out)
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    validate_replay_json(data)
    assert [(t["runner"], t["torch"].split("+")[0]) for t in data["targets"]] == [("venv", "2.5.1"), ("venv", "2.13.0")]
    assert len(data["results"]) == 4
    assert {r["verdict"] for r in data["results"]} == {"unchanged"}  # reworded on 2.5.1, the same breaks
    assert result.stdout.count("target venv:torch-") == 2
    assert "venv:torch-2.5.1" in result.stderr  # progress names each target


@pytest.mark.slow
def test_a_cuda_case_on_a_cpu_target_is_told_apart_from_a_broken_case(starter_copy: Path):
    """Real probe, real CPU torch: a script that asks for CUDA is 'needs a GPU this target lacks'
    (env_failed), while a script that fails on its own stays a failure of the case."""
    import dataclasses

    import torch

    from casekit.bundle import sha256_text

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the CPU-host path is not reachable here")
    [base] = Archive(starter_copy).load_all(["item-branch"])

    def with_pre(case_id: str, first_line: str):  # type: ignore[no-untyped-def]
        text = base.pre.source.replace("import torch\n", f"import torch\n{first_line}\n", 1)
        assert text != base.pre.source
        pre = dataclasses.replace(base.pre, source=text, sha256=sha256_text(text))
        return dataclasses.replace(base, id=case_id, pre=pre)

    cases = [
        with_pre("needs-gpu", "torch.ones(2, device='cuda')"),
        with_pre("broken", "raise RuntimeError('this case is broken')"),
    ]
    report = replay(cases, [TargetSpec(runner="python")], ReplayOptions(record=False), None, make_runner, quiet)
    results = {result.case_id: result for result in report.results}
    gpu = results["needs-gpu"]
    assert gpu.verdict == "env_failed" and gpu.scripts["pre"].status.value == "env_failed"
    assert "needs a GPU this target lacks" in gpu.scripts["pre"].observation.detail
    assert "--cuda cu126" in gpu.scripts["pre"].observation.detail
    broken = results["broken"]
    assert broken.scripts["pre"].status.value == "eager_failed", "a case's own failure is not a GPU problem"
    assert broken.verdict != "env_failed"


@pytest.mark.slow
def test_a_broken_fix_is_verified_in_the_probe_that_ran_the_replay(starter_copy: Path, monkeypatch):
    """The post-fix of tensor-if now does what the repro does (its break is back): the fix is broken,
    the way back (fullgraph=False) is proven, and the proof ran in the probe that was already warm,
    one torch import for the whole target, where the runner's own probe would import torch twice."""
    from dataclasses import replace as changed

    from casekit.bundle import sha256_text

    [case] = Archive(starter_copy).load_all(["tensor-if"])
    assert case.post is not None
    broken = changed(case, post=changed(case.post, source=case.pre.source, sha256=sha256_text(case.pre.source)))
    said: list[str] = []
    options = ReplayOptions(record=False)
    report = replay([broken], [TargetSpec(runner="python")], options, None, make_runner, said.append)
    [result] = report.results
    assert result.verdict == "fix_broken" and result.rollback.needed and result.rollback.verified is True
    assert result.rollback.path == "post-fix with fullgraph=False"
    imports = [m for m in said if "importing torch" in m]
    assert len(imports) == 1, said
    assert any("verifying rollback" in m for m in said) and any(".rollback done" in m for m in said)
    # the control: a session whose every batch is the runner's own (no warm probe) imports torch twice
    from casekit.runners.python import PythonRunner

    said.clear()
    monkeypatch.setattr(PythonRunner, "open_session", lambda self, entry, **options: BatchSession(self, entry))
    again = replay([broken], [TargetSpec(runner="python")], options, None, make_runner, said.append)
    assert again.results[0].rollback.verified is True
    assert len([m for m in said if "importing torch" in m]) == 2
