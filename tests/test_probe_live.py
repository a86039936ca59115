"""The probe on real torch (2.13.0, the local install): hostile scripts become statuses, never probe crashes."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

from casekit.observe import interpret
from casekit.runners.interface import ProbeJob, TargetSpec
from casekit.runners.registry import make_runner

from .conftest import FIXTURES, SCRIPTS
from .fixtures.record_probe_fixtures import beside_scripts
from .security.procs import wait_unmarked

HOSTILE = {
    "prints": ("ok", None),
    "raises": ("eager_failed", "ValueError: the repro itself is broken"),
    "hangs": ("timeout", "timed out after 8.0 s"),
    "os_exit": ("eager_failed", "exited with code 3"),
    "os_exit_zero": ("ok", None),
    "kills_itself": ("eager_failed", "killed by signal 9"),
    "forks": ("ok", None),
    "network": ("eager_failed", "network access is disabled"),
    "compile_crash": ("compile_error", "Failed to trace builtin operator"),
    "mismatch": ("mismatch", "compiled output differs from eager"),
    "exit_only_compiled": (
        "compile_error",
        "stopped early with sys.exit(0) at exit_only_compiled.py:17, where the eager run ran to its end",
    ),
    "exits_at_its_end": ("ok", None),
}
TOKEN = uuid.uuid4().hex


@pytest.fixture(scope="module")
def hostile_batch():
    os.environ["CASEKIT_TEST_TOKEN"] = TOKEN
    runner = make_runner(
        TargetSpec(runner="python", options=(("env", "CASEKIT_TEST_TOKEN"),))
    )  # the marker reaches the scripts
    # generous limits (a loaded 2-core machine is slow), a short one only for the script that hangs
    jobs = [ProbeJob(id=name, script=SCRIPTS / f"{name}.py", timeout=8 if name == "hangs" else 120) for name in HOSTILE]
    return runner.run_probe(jobs, lambda message: None)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_script_becomes_a_status(hostile_batch, name):
    status, detail = HOSTILE[name]
    raw = hostile_batch.results[name]
    observation = interpret(raw, raw["script"], f"{name}.py", (SCRIPTS / f"{name}.py").read_text())
    assert observation.status.value == status, observation.detail
    if detail:
        assert detail in observation.detail


@pytest.mark.slow
def test_script_stdout_is_kept_apart_from_results(hostile_batch):
    raw = hostile_batch.results["prints"]
    assert "this script prints to stdout" in raw["runs"]["compiled"]["stdout_tail"]
    observation = interpret(raw, raw["script"], "prints.py", "")
    assert [s.line for s in observation.sites] == [8]


@pytest.mark.slow
def test_compile_only_crash_records_the_user_location(hostile_batch):
    raw = hostile_batch.results["compile_crash"]
    observation = interpret(raw, raw["script"], "compile_crash.py", "")
    assert observation.error is not None and observation.error.location is not None
    assert observation.error.location.where() == "compile_crash.py:7"


@pytest.mark.slow
def test_forked_orphans_do_not_outlive_the_run(hostile_batch):
    # forks.py leaves a sleeping child; it carries CASEKIT_TEST_TOKEN in its environment
    assert hostile_batch.results["forks"]["runs"]["eager"]["status"] == "ok", "the forking script ran"
    assert wait_unmarked(TOKEN) == []


@pytest.mark.slow
def test_one_torch_import_for_the_whole_batch(hostile_batch):
    # every script ran from one probe process: the environment was written once, with one import time
    assert hostile_batch.import_s is not None and hostile_batch.import_s < 60
    assert set(hostile_batch.results) == set(HOSTILE)


@pytest.mark.slow
def test_live_2_13_run_agrees_with_the_recorded_fixtures():
    runner = make_runner(TargetSpec(runner="python"))
    scripts = sorted((FIXTURES / "scripts").glob("*.py"))
    jobs = [ProbeJob(id=s.stem, script=s, timeout=60, includes=beside_scripts()) for s in scripts]
    batch = runner.run_probe(jobs, lambda m: None)
    if not batch.environment["torch"].startswith("2.13.0"):
        pytest.skip(f"fixtures were recorded on 2.13.0; this interpreter has torch {batch.environment['torch']}")
    compared = 0
    for script in scripts:
        recorded_raw = json.loads((FIXTURES / "probe" / "2.13.0" / f"{script.stem}.json").read_text())
        if _other_releases(_libraries(recorded_raw), _libraries(batch.results[script.stem])):
            continue  # recorded beside another release of a library it breaks in (transformers 4.47.1): other lines
        live = interpret(
            batch.results[script.stem], batch.results[script.stem]["script"], script.name, script.read_text()
        )
        recorded = interpret(recorded_raw, recorded_raw["script"], script.name, script.read_text())
        assert [(s.where(), s.category) for s in live.sites] == [(s.where(), s.category) for s in recorded.sites]
        assert live.graphs == recorded.graphs
        compared += 1
    assert compared >= len(scripts) - 2, f"only {compared} of {len(scripts)} fixtures ran beside their libraries"


def _libraries(raw: dict) -> dict:
    """The packages the compiled run imported, with their versions (the fixture's and the live run's)."""
    return (raw.get("runs", {}).get("compiled") or {}).get("imported_packages") or {}


def _other_releases(recorded: dict, live: dict) -> list[str]:
    return [name for name in recorded.keys() & live.keys() if recorded[name] != live[name]]


LIBRARY_AND_CALLER = ["library_and_caller_item", "library_logger_and_caller_item"]


def _library_and_caller_sites_live(python: str, release: str) -> None:
    """The scripts whose library function breaks below a script line that breaks too, run now on `python`: two
    sites each, the second on the caller's line, as recorded on `release` (test_observe.py reads the records)."""
    runner = make_runner(TargetSpec(runner="python", python=python))
    scripts = [FIXTURES / "scripts" / f"{name}.py" for name in LIBRARY_AND_CALLER]
    jobs = [ProbeJob(id=s.stem, script=s, timeout=120, includes=beside_scripts()) for s in scripts]
    batch = runner.run_probe(jobs, lambda m: None)
    assert batch.environment["torch"].startswith(release)
    for script in scripts:
        live = interpret(
            batch.results[script.stem], batch.results[script.stem]["script"], script.name, script.read_text()
        )
        recorded_raw = json.loads((FIXTURES / "probe" / release / f"{script.stem}.json").read_text())
        recorded = interpret(recorded_raw, recorded_raw["script"], script.name, script.read_text())
        assert [(s.where(), s.category) for s in live.sites] == [(s.where(), s.category) for s in recorded.sites]
        assert len(live.sites) == 2 and live.sites[1].where() == f"{script.name}:8", live.sites
        assert live.graphs == recorded.graphs == 6


@pytest.mark.slow
def test_live_2_13_runs_keep_a_library_break_and_a_break_on_its_callers_line_apart():
    _library_and_caller_sites_live(sys.executable, "2.13.0")


@pytest.mark.slow
@pytest.mark.torch251
def test_live_2_5_1_runs_keep_a_library_break_and_a_break_on_its_callers_line_apart(torch251_python):
    # 2.5.1 logs the line's own break from the resume function that starts on that line
    _library_and_caller_sites_live(torch251_python, "2.5.1")


PLAIN_AND_COMPILED = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((4,), 2.0))

    def forward(self, x):
        return x * self.scale


model = Net()
compiled = torch.compile(model, backend="eager")
x = torch.arange(4.0)
for _ in range(2):
    print(model(x + 10).sum())  # the plain model, called as the script calls it: not an entry point's call
    print(compiled(x).sum())
compiled.eval()  # the wrapper passes what it does not have on to the module, as torch's own does
print(not model.training, compiled.scale is model.scale, getattr(compiled, "_orig_mod", None) is model)
print(sorted(compiled.state_dict()))
"""


@pytest.mark.slow
def test_the_eager_baseline_records_only_the_compiled_object_s_calls(tmp_path):
    """torch.compile(model) returns a wrapper and leaves `model` as it was: the eager baseline does the same,
    so calls of the plain model are not entry calls in either run and the outputs pair call for call."""
    script = tmp_path / "plain_and_compiled.py"
    script.write_text(PLAIN_AND_COMPILED)
    batch = make_runner(TargetSpec(runner="python")).run_probe(
        [ProbeJob(id="both", script=script, timeout=120)], lambda message: None
    )
    raw = batch.results["both"]
    runs = raw["runs"]
    assert runs["eager"]["status"] == "ok", runs["eager"].get("exception")
    assert [c["index"] for c in runs["eager"]["calls"]] == [c["index"] for c in runs["compiled"]["calls"]] == [0, 1]
    assert runs["eager"]["entries"]["Net"]["calls"] == runs["compiled"]["entries"]["Net"]["calls"] == 2
    assert all(c["comparison"]["allclose"] for c in runs["compiled"]["calls"]), runs["compiled"]["calls"]
    # the wrapper as torch.compile's: what it lacks comes from the module, state_dict keys named as torch names them
    for run in ("eager", "compiled"):
        assert runs[run]["stdout_tail"].strip().splitlines()[-2:] == ["True True True", "['_orig_mod.scale']"], run
    observation = interpret(raw, raw["script"], script.name, PLAIN_AND_COMPILED)
    assert observation.status.value == "ok", observation.detail
