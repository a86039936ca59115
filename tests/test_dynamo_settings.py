"""Dynamo settings per target, whose change it was (torch, a library, a setting), and API drift.

Real torch throughout: the probe's own functions on torch 2.13's real exceptions and config module,
real replays through the CLI (a preview of nested graph breaks on 2.13, a library varied with torch
fixed, from wheels built here), and a case that uses what torch 2.5.1 lacks, replayed there.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from casekit import probe
from casekit.bundle import load_case
from casekit.classify import (
    Axes,
    attribute_changes,
    attributed,
    axes_differences,
    classify_case,
    recorded_axes,
    unknown_settings,
)
from casekit.errors import CasekitError
from casekit.model import ScriptRole
from casekit.replay.plan import TargetChoice
from casekit.runners import registry
from casekit.runners.interface import TargetSpec
from tests.conftest import ROOT, run_casekit
from tests.wheels import build_wheel, env_over, install_wheel

torch = pytest.importorskip("torch")

NESTED = """import torch

def inner(x):
    y = x * 2
    print("inner")  # a break two frames below the compiled function
    return y + 1

def middle(x):
    return inner(x) - 1

@torch.compile(backend="eager")
def outer(x):
    return middle(x.sin()).cos()

outer(torch.ones(3))
"""


# ------------------------------------------------------------------ the probe, on torch 2.13 itself


def _raised(statement: str) -> BaseException:
    try:
        exec(statement, {"torch": torch})
    except BaseException as error:  # noqa: BLE001 - the exception is what is under test
        return error
    raise AssertionError(f"{statement} did not raise")


@pytest.mark.parametrize(
    ("statement", "lacks"),
    [
        ("torch._dynamo.config.no_such_limit = 4", "torch._dynamo.config.no_such_limit"),  # a config name (set)
        ("torch._dynamo.config.no_such_limit", "torch._dynamo.config.no_such_limit"),  # read
        ("torch.compiler.no_such_stance_api('eager')", "torch.compiler.no_such_stance_api"),  # an API
        ("from torch.compiler import no_such_api", "torch.compiler.no_such_api"),
        ("import torch._dynamo.no_such_module", "torch._dynamo.no_such_module"),
    ],
)
def test_the_missing_name_comes_from_the_real_exception(statement, lacks, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run's folder: a package installed under the checkout (.venv) is not the script's
    assert probe.missing_api(_raised(statement)) == lacks


def test_a_stance_the_release_lacks_is_named_from_the_compile_error():
    try:
        torch.compiler.set_stance("no_such_stance")
        error = _raised("torch.compile(lambda x: x + 1, backend='eager')(torch.ones(2))")
    finally:
        torch.compiler.set_stance("default")
    assert probe.missing_api(error) == "the compiler stance 'no_such_stance'"


@pytest.mark.parametrize(
    "statement",
    [
        "None.shape",  # an attribute of a value, not of a package's module
        "import no_such_top_level_module",  # not installed at all: not a release's lack
        "raise AttributeError('module torch has no attribute x, said by hand')",
    ],
)
def test_other_errors_are_not_api_drift(statement):
    assert probe.missing_api(_raised(statement)) is None


def test_the_probe_records_the_shape_settings_with_their_defaults():
    settings = probe.dynamo_settings(torch, {"nested_graph_breaks": True})
    assert settings["nested_graph_breaks"] == {"value": True, "default": False, "set": True}
    assert settings["capture_scalar_outputs"] == {"value": False, "default": False}
    assert settings["stance"] == {"value": "default", "default": "default"}
    # an old name kept for a new one says so, with the new one's values
    assert settings["cache_size_limit"]["alias_of"] == "torch._dynamo.config.recompile_limit"
    assert settings["cache_size_limit"]["value"] == settings["recompile_limit"]["value"] == 8


def test_the_probe_refuses_a_name_or_a_value_this_release_lacks():
    assert probe.check_dynamo_config(torch, {"nested_graph_breaks": True}) is None
    why = probe.check_dynamo_config(torch, {"nested_graph_breakz": True})
    assert why.startswith(
        f"torch {torch.__version__} lacks the Dynamo setting torch._dynamo.config.nested_graph_breakz"
    )
    assert "nested_graph_breaks" in why  # the close name it has
    assert "takes True or False" in probe.check_dynamo_config(torch, {"nested_graph_breaks": 3})


# ------------------------------------------------------------------------- flags, labels, axes


def test_vary_flags_add_one_twin_per_target_and_the_label_names_it():
    specs = TargetChoice(pythons=("python3",), vary_dynamo=("nested_graph_breaks=True",)).specs()
    assert [registry.label(s) for s in specs] == ["python:python3", "python:python3+nested_graph_breaks=True"]
    assert specs[1].dynamo == (("nested_graph_breaks", "True"),)
    managed = TargetChoice(torches=("2.13.0",), vary_packages=("mylib==2.0",)).specs()
    assert [registry.label(s) for s in managed] == ["venv:torch-2.13.0", "venv:torch-2.13.0+mylib==2.0"]
    assert registry.replay_flags(managed[1])[-2:] == ["--package", "mylib==2.0"]


@pytest.mark.parametrize(
    ("choice", "said"),
    [
        (TargetChoice(dynamo=("nested graph=1",)), "--dynamo takes NAME=VALUE"),
        (TargetChoice(dynamo=("x=[1, 2]",)), "give True, False, a number or a name"),
        (TargetChoice(torches=("2.13",), packages=("torch==2.5.1",)), "choose torch with --torch"),
        (TargetChoice(pythons=("python3",), vary_packages=("mylib==2.0",)), "only managed targets"),
    ],
)
def test_bad_setting_flags_are_one_line(choice, said):
    with pytest.raises(CasekitError, match=said):
        choice.specs()


def test_a_setting_the_recording_did_not_record_is_taken_at_its_default():
    target = Axes("2.13.0+cpu", {}, {"nested_graph_breaks": (True, False), "recompile_limit": (8, 8)})
    (difference,) = axes_differences(Axes("2.13.0+cpu"), target)
    assert (difference.axis, difference.before, difference.after) == ("setting nested_graph_breaks", False, True)
    both = axes_differences(Axes("2.13.0+cpu", {"mylib": "1.0"}), Axes("2.5.1", {"mylib": "2.0"}))
    assert [d.axis for d in both] == ["torch", "library mylib"]


def _with_setting(case_id: str, name: str, archive: Path, drop_sites: bool) -> Path:
    """The starter tensor-if, recorded with Dynamo setting `name` on (default off); with `drop_sites` its
    record shows no break, so a replay sees its break as new: a change to attribute."""
    data = tomllib.loads((ROOT / "cases" / "tensor-if.toml").read_text())
    data["id"] = case_id
    data["environment"]["dynamo_settings"] = {name: {"value": True, "default": False}}
    if drop_sites:
        data["observations"]["pre"]["sites"] = []
    path = archive / f"{case_id}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def test_a_recorded_setting_the_release_does_not_know_is_not_a_cause(tmp_path):
    """Pure attribution: a name the target's release does not report is no difference, and the replay
    says it is unknown there; the same value under a name the release knows is the cause (the control)."""
    target = Axes("2.13.0+cpu", {}, {"capture_scalar_outputs": (False, False)})
    invented = Axes("2.13.0+cpu", {}, {"made_up_flag": (True, False)})
    assert axes_differences(invented, target) == []
    assert [(u.name, u.before) for u in unknown_settings(invented, target)] == [("made_up_flag", True)]
    known = Axes("2.13.0+cpu", {}, {"capture_scalar_outputs": (True, False)})
    (difference,) = axes_differences(known, target)  # control: the rule does not drop every setting
    assert (difference.axis, difference.before, difference.after) == ("setting capture_scalar_outputs", True, False)
    assert unknown_settings(known, target) == []
    assert unknown_settings(Axes("2.13.0", {}, {"made_up_flag": (False, False)}), target) == []  # at its default

    for name, axis in (("made_up_flag", ""), ("capture_scalar_outputs", "setting capture_scalar_outputs")):
        case = load_case(_with_setting("tensor-if", name, tmp_path, drop_sites=False))
        seen_nothing = {w: dataclasses.replace(o, sites=[]) for w, o in case.observations.items()}
        result = classify_case(case, "python:current", seen_nothing)
        said = attribute_changes(recorded_axes(case), [("python:current", target, result)])
        result = attributed(result, said["python:current"])
        (gone,) = result.scripts[ScriptRole.PRE].sites
        assert gone.axis == axis, gone.cause
        unknown = "setting made_up_flag (recorded True) is unknown to torch 2.13.0: not a cause"
        assert (unknown in result.reasons) is (name == "made_up_flag"), result.reasons


# ------------------------------------------------------------------------------ real replays


@pytest.mark.process
def test_a_replay_never_names_a_made_up_recorded_setting_as_a_cause(tmp_path):
    """Real torch 2.13.0: two copies of a starter whose record shows no break, one recorded with a setting
    no release has, one (the control) with a real setting of 2.13 on; the replay sees the break as new in
    both, and names the real setting only."""
    archive = tmp_path / "cases"
    archive.mkdir()
    _with_setting("made-up", "made_up_flag", archive, drop_sites=True)
    _with_setting("real-setting", "capture_scalar_outputs", archive, drop_sites=True)
    done, document = _replay_json(tmp_path, archive, "--python", sys.executable)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    results = {r["case"]: r for r in document["results"]}
    (made_up,) = results["made-up"]["scripts"]["pre"]["sites"]
    assert made_up["class"] == "new"
    assert made_up.get("axis", "") == "" and "made_up_flag" not in made_up["cause"], made_up
    assert made_up["cause"].startswith("new, though nothing differs from the recording")
    said = f"setting made_up_flag (recorded True) is unknown to torch {torch.__version__.split('+')[0]}: not a cause"
    assert said in results["made-up"]["reasons"]
    (real,) = results["real-setting"]["scripts"]["pre"]["sites"]
    assert real["axis"] == "setting capture_scalar_outputs", real
    assert real["cause"] == ("new with capture_scalar_outputs=False; recorded capture_scalar_outputs=True")


def _replay_json(tmp_path: Path, archive: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "replay.json"
    done = run_casekit("replay", "--archive", str(archive), *flags, "--json", str(out))
    return done, json.loads(out.read_text()) if out.exists() else {}


def python_label(python: object) -> str:
    """The stable label of an interpreter target (its portable form: no folder of this machine)."""
    return registry.label(TargetSpec(runner="python", python=str(python)))


def _sites(document: dict, case: str, label_part: str) -> list[dict]:
    (result,) = [r for r in document["results"] if r["case"] == case and r["target"].endswith(label_part)]
    return result["scripts"]["pre"]["sites"]


@pytest.mark.process
def test_nested_graph_breaks_preview_names_the_setting_for_every_change(tmp_path):
    """The flip previewed on 2.13: the starter's metrics-disable gains a break with it on, and the
    report says so; a break three frames deep is one site either way, in fewer graphs with it on."""
    archive = tmp_path / "cases"
    archive.mkdir()
    (archive / "metrics-disable.toml").write_text((ROOT / "cases" / "metrics-disable.toml").read_text())
    script = tmp_path / "nested.py"
    script.write_text(NESTED)
    captured = run_casekit(
        "capture",
        str(script),
        "--archive",
        str(archive),
        "--id",
        "nested-print",
        "--title",
        "print deep",
        "--waive",
        "fix",
    )
    assert captured.returncode == 0, captured.stderr[-2000:]
    done, document = _replay_json(
        tmp_path, archive, "--python", sys.executable, "--vary-dynamo", "nested_graph_breaks=True"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    off, on = sorted(document["targets"], key=lambda target: "+" in target["label"])
    assert on["dynamo"]["nested_graph_breaks"] == {"value": True, "default": False, "set": True}
    assert off["dynamo"]["nested_graph_breaks"] == {"value": False, "default": False}
    # one deep break: one site with it off (seen from three frames) and on
    for part in ("=True", python_label(sys.executable)):
        (site,) = _sites(document, "nested-print", part)
        assert site["class"] == "persists"
    graphs = {r["target"]: r["scripts"]["pre"]["graphs"] for r in document["results"] if r["case"] == "nested-print"}
    assert graphs[on["label"]] < graphs[off["label"]]
    changed = [s for s in _sites(document, "metrics-disable", "=True") if s["class"] != "persists"]
    assert changed, "metrics-disable changes with nested graph breaks on (2.13.0)"
    for site in changed:
        assert site["axis"] == "setting nested_graph_breaks"
        assert site["cause"].endswith(" with nested_graph_breaks=True; recorded nested_graph_breaks=False")
    assert all(s["class"] == "persists" for s in _sites(document, "metrics-disable", python_label(sys.executable)))
    assert "changed by setting nested_graph_breaks: " in done.stdout + done.stderr
    said = r"pre: its changes \([^)]*new[^)]*\) coincide with setting nested_graph_breaks False -> True, the only difference"
    assert re.search(said, done.stdout + done.stderr), done.stdout  # the changes named, not only "coincide"
    assert "Dynamo nested_graph_breaks=True (defaults otherwise)" in done.stdout + done.stderr
    for form in ("md", "json"):  # every report format says it too
        report = run_casekit(
            "report", "--results", str(tmp_path / "replay.json"), "--archive", str(archive), "-f", form, "--out", "-"
        )
        assert "changed by setting nested_graph_breaks: new with nested_graph_breaks=True" in report.stdout, form


@pytest.mark.process
def test_a_setting_the_release_lacks_fails_the_target_in_one_line(tmp_path):
    archive = tmp_path / "cases"
    archive.mkdir()
    (archive / "module-break.toml").write_text((ROOT / "cases" / "module-break.toml").read_text())
    done, document = _replay_json(tmp_path, archive, "--python", sys.executable, "--dynamo", "nested_graph_breakz=True")
    assert done.returncode == 2
    (target,) = document["targets"]
    assert target["error"].endswith(
        f"torch {torch.__version__} lacks the Dynamo setting torch._dynamo.config.nested_graph_breakz "
        "(it has: nested_graph_breaks)"
    )
    assert "torch is not importable" not in target["error"]


# --------------------------------------------------------------- a library varied, torch fixed


LIBRARY = {
    "1.0": "def scale(x):\n    return x * 2\n",
    "2.0": "def scale(x):\n    print('scaling')  # 2.0 logs: a graph break inside the library\n    return x * 2\n",
}


def _wheel(folder: Path, version: str) -> Path:
    """A real wheel of `brklib` (PEP 427: the module, METADATA, WHEEL, RECORD), built here."""
    return build_wheel(folder, "brklib", version, {"brklib/__init__.py": LIBRARY[version]})


def _env_with(tmp_path: Path, version: str) -> str:
    """A venv over this interpreter's torch with brklib `version` installed from its wheel by pip, offline."""
    python = env_over(tmp_path / f"env-{version}")
    install_wheel(python, _wheel(tmp_path, version))
    return python


@pytest.mark.process
def test_a_library_change_with_torch_fixed_is_named_as_the_librarys(tmp_path):
    old, new = _env_with(tmp_path, "1.0"), _env_with(tmp_path, "2.0")
    script = tmp_path / "uses_lib.py"
    script.write_text(
        "import torch\nimport brklib\n\n\n@torch.compile(backend='eager')\ndef step(x):\n"
        "    y = x.sin()\n    return brklib.scale(y) + 1\n\n\nstep(torch.ones(4))\n"
    )
    archive = tmp_path / "cases"
    captured = run_casekit(
        "capture", str(script), "--archive", str(archive), "--id", "lib-case", "--title", "lib", "--python", old,
        "--waive", "fix",
    )  # fmt: skip
    assert captured.returncode == 0, captured.stderr[-2000:]
    done, document = _replay_json(tmp_path, archive, "--python", old, "--python", new)
    assert done.returncode == 0, done.stderr[-2000:]
    libraries = {t["label"]: t["libraries"] for t in document["targets"]}
    assert libraries == {python_label(old): {"brklib": "1.0"}, python_label(new): {"brklib": "2.0"}}
    assert _sites(document, "lib-case", python_label(old)) == []  # 1.0: no break, as recorded
    (site,) = _sites(document, "lib-case", python_label(new))
    assert site["class"] == "new"
    assert site["axis"] == "library brklib"
    assert site["cause"].startswith("new with brklib 2.0")


# ------------------------------------------------------------------- API drift, on torch 2.5.1


DRIFT = {
    "new-config-name": "torch._dynamo.config.recompile_limit = 4  # cache_size_limit before 2.7\n",
    "new-stance-api": "torch.compiler.set_stance('default')  # 2.6+\n",
}


@pytest.mark.process
def test_a_script_using_what_the_release_lacks_is_unobserved_not_regressed(tmp_path, torch251_python):
    """Captured on 2.13, replayed on 2.5.1: each script names the one thing 2.5.1 lacks; and the twin
    asking 2.5.1 for nested graph breaks is refused in one line."""
    archive = tmp_path / "cases"
    for case_id, line in DRIFT.items():
        script = tmp_path / f"{case_id}.py"
        script.write_text(
            "import torch\n"
            + line
            + "\n\n@torch.compile(backend='eager')\ndef f(x):\n    return x.sin() + 1\n\n\nf(torch.ones(3))\n"
        )
        captured = run_casekit(
            "capture", str(script), "--archive", str(archive), "--id", case_id, "--title", case_id, "--waive", "fix"
        )
        assert captured.returncode == 0, captured.stderr[-2000:]
    done, document = _replay_json(
        tmp_path, archive, "--python", torch251_python, "--vary-dynamo", "nested_graph_breaks=True"
    )
    plain, twin = sorted(document["targets"], key=lambda target: "+" in target["label"])
    assert plain["error"] is None and plain["torch"].startswith("2.5.1")
    assert "nested_graph_breaks" not in plain["dynamo"] and plain["dynamo"]["cache_size_limit"]["default"] == 8
    assert twin["error"].endswith("lacks the Dynamo setting torch._dynamo.config.nested_graph_breaks")
    lacks = {"new-config-name": "torch._dynamo.config.recompile_limit", "new-stance-api": "torch.compiler.set_stance"}
    for result in document["results"]:
        if result["target"] != plain["label"]:
            continue
        assert (result["verdict"], result["severity"]) == ("unobserved", "info")
        pre = result["scripts"]["pre"]
        assert pre["status"] == "unobserved"
        assert pre["detail"] == f"this release lacks {lacks[result['case']]}"
        first, *others = result["reasons"]
        assert first == f"pre: unobserved: this release lacks {lacks[result['case']]}"
        # and, where the release is the one difference, the status change is put down to it
        assert all(r.startswith("pre: its changes (status ok -> unobserved) coincide with torch ") for r in others)
    assert done.returncode == 2  # the refused twin, not the verdicts


def test_bisect_sets_the_setting_on_every_release_and_keeps_its_results_apart():
    from casekit.bisect.plan import BisectRequest

    config = BisectRequest("2.5.1", "2.13.0", case_ids=("c",), dynamo=("nested_graph_breaks=True",)).release_config()
    assert config.spec("2.13.0").dynamo == (("nested_graph_breaks", "True"),)
    plain = BisectRequest("2.5.1", "2.13.0", case_ids=("c",)).release_config()
    assert config.target_key("2.13.0") == plain.target_key("2.13.0") + "+nested_graph_breaks=True"
    with pytest.raises(CasekitError, match="--dynamo takes NAME=VALUE"):
        BisectRequest("2.5.1", "2.13.0", case_ids=("c",), dynamo=("nested_graph_breaks",))


def test_a_package_pin_replaces_the_cases_pin_and_the_setting_reaches_every_job(tmp_path):
    """Managed targets: --package / --vary-package replace the pin the cases recorded (one version of a
    library per env); --dynamo travels in each job's request. Through the replay core, with recorded
    probe results served at the runner interface (the venv build itself is tested in test_runner_venv)."""
    from casekit.bundle import load_case
    from casekit.replay.run import ReplayOptions, run_target
    from tests.fakes import RecordedRunner, Target

    case = load_case(ROOT / "cases" / "module-break.toml")
    case.environment["packages"] = {"mylib": "1.0", "other": "3.1"}
    specs = TargetChoice(
        torches=("2.13.0",), dynamo=("nested_graph_breaks=True",), vary_packages=("mylib==2.0",)
    ).specs()
    log: list = []
    runs = [
        run_target(spec, [case], ReplayOptions(record=False), lambda s: RecordedRunner(s, Target("2.13.0"), log), print)
        for spec in specs
    ]
    assert [r.spec.extra_packages for r in runs] == [("mylib==1.0", "other==3.1"), ("other==3.1", "mylib==2.0")]
    assert all(job.to_request("x")["dynamo_config"] == {"nested_graph_breaks": True} for _, job in log)


def test_a_scheduled_job_gets_the_settings_so_it_cuts_the_same_matrix():
    from casekit.schedule.emit import replay_flags

    choice = TargetChoice(
        torches=("2.13",), dynamo=("capture_scalar_outputs=True",), vary_dynamo=("nested_graph_breaks=True",)
    )
    flags = replay_flags(choice)
    assert flags[-4:] == ["--dynamo", "capture_scalar_outputs=True", "--vary-dynamo", "nested_graph_breaks=True"]


@pytest.mark.process
def test_on_torch_2_5_1_the_probe_reads_the_older_config_tables(torch251_python):
    """2.5's config module keeps current values in `_config` and defaults in `_default`; no stances yet."""
    code = (
        "import json, sys, torch; sys.path.insert(0, sys.argv[1]); import probe; "
        "print(json.dumps([probe.dynamo_settings(torch), probe.check_dynamo_config(torch, {'recompile_limit': 4})]))"
    )
    done = subprocess.run(
        [torch251_python, "-c", code, str(ROOT / "casekit")], capture_output=True, text=True, timeout=300, check=True
    )
    settings, refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert settings["cache_size_limit"] == {"value": 8, "default": 8}
    assert settings["capture_scalar_outputs"] == {"value": False, "default": False}
    assert "nested_graph_breaks" not in settings and "stance" not in settings and "recompile_limit" not in settings
    assert (
        refused.startswith("torch 2.5.1") and "lacks the Dynamo setting torch._dynamo.config.recompile_limit" in refused
    )
