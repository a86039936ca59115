"""Capture for real (torch 2.13.0 in subprocesses): bad captures are refused, kept ones are marked,
multi-file repros replay like `python repro.py`, and no bundle names a folder of this machine."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bundle import load_case
from casekit.model import FullgraphStatus, ScriptRole, ScriptStatus
from casekit.replay.run import ReplayOptions, replay
from casekit.runners.interface import TargetSpec
from casekit.runners.registry import make_runner
from casekit.scrub import machine_paths_in

from .conftest import ROOT, run_casekit

pytestmark = pytest.mark.slow

LOCAL_WHEELS = Path("/opt/wheels")

BREAK = """\
import torch


def step(x):
    if x.sum() > 0:  # data-dependent branch: a graph break
        return x * 2
    return x - 1


compiled = torch.compile(step)
print("result", compiled(torch.ones(3)).sum().item())
"""

FIX_THAT_FIXES_NOTHING = BREAK.replace("# data-dependent branch: a graph break", "# 'fixed' (it is not)")

CLEAN = """\
import torch

compiled = torch.compile(lambda x: x.sin() + 1)
print("result", compiled(torch.ones(3)).sum().item())
"""

BAD_SCRIPTS = {
    "eager-raises": (
        "import torch\n\ncompiled = torch.compile(lambda x: x + 1)\nraise ValueError('weights.pt is missing')\n",
        [],
        "gate eager (pre-fix): the eager run failed: ValueError: weights.pt is missing",
    ),
    "times-out": (
        "import time\nimport torch\n\ntime.sleep(120)\n",
        ["--timeout", "3"],
        "gate timeout (pre-fix)",
    ),
    "needs-cuda": (  # on this CPU build of torch: the advice is a GPU target, not --include
        "import torch\n\ncompiled = torch.compile(lambda x: x + 1)\nprint(compiled(torch.ones(3, device='cuda')))\n",
        [],
        "the eager run failed: AssertionError: Torch not compiled with CUDA enabled; "
        "this interpreter has no CUDA: use a GPU target",
    ),
    "never-compiles": (
        "import torch\n\nprint('fullgraph=True: compiles as one graph')\n",
        [],
        "gate compiled (pre-fix): the script never calls torch.compile",
    ),
    "compiles-but-never-calls": (
        "import torch\n\n\ndef step(x):\n    return x + 1\n\n\ncompiled = torch.compile(step)\nprint('built')\n",
        [],
        "gate compiled (pre-fix): torch.compile'd step never called",
    ),
    "negative-timeout": (
        BREAK,
        ["--timeout", "-1"],
        "--timeout must be a finite number of seconds greater than 0, not -1.0",
    ),
}


# A real crash under compile (torch 2.13.0, and it runs eagerly): the first graph compiles and runs, the
# print breaks, and the resume function specializes a dimension marked dynamic, which Dynamo raises
# (ConstraintViolationError) rather than breaking on. The module's one call raised: its entry point ran.
CRASH_UNDER_COMPILE = """\
import torch
import torch._dynamo


class Head(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("scaled")  # a graph break: the first graph is compiled and runs
        return self.tail(x, y)

    def tail(self, x, y):
        if x.shape[0] == 4:  # specializes a dimension marked dynamic: a hard error under compile
            return y.sum()
        return y.mean()


x = torch.ones(4, 3)
torch._dynamo.mark_dynamic(x, 0)
model = torch.compile(Head(), backend="eager")
print(model(x))
"""


def test_a_crash_under_compile_after_the_entry_point_ran_is_kept_as_compile_error(tmp_path: Path):
    script = write(tmp_path / "src", {"repro.py": CRASH_UNDER_COMPILE})
    archive = tmp_path / "cases"
    result = run_casekit("capture", str(script), "--archive", str(archive), "--title", "mark_dynamic specialized")
    assert result.returncode == 0, result.stdout + result.stderr
    case = Archive(archive).load("mark-dynamic-specialized")
    pre = case.observations["pre"]
    assert pre.status.value == "compile_error" and "ConstraintViolationError" in pre.detail
    assert pre.graphs >= 1 and pre.sites  # it compiled and broke before it raised
    assert [entry.calls for entry in pre.entries] == [1]  # the module's raising call is a call
    assert case.capture is not None and not case.capture.waived_gates


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder / "repro.py"


def assert_portable(folder: Path) -> None:
    """No bundle in `folder` names a folder of this machine (home, /tmp, /root, /work, the interpreter)."""
    bundles = sorted(folder.glob("*.toml"))
    assert bundles
    for bundle in bundles:
        assert machine_paths_in(bundle.read_text()) == [], bundle


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if not line.startswith("  ... ")]


@pytest.mark.parametrize("name", sorted(BAD_SCRIPTS))
def test_a_bad_capture_exits_1_with_its_reason_and_writes_nothing(tmp_path: Path, name: str):
    source, flags, reason = BAD_SCRIPTS[name]
    script = write(tmp_path / "src", {"repro.py": source})
    archive = tmp_path / "cases"
    result = run_casekit("capture", str(script), "--archive", str(archive), *flags)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = error_lines(result)
    assert reason in lines[0], lines
    assert "Traceback" not in result.stderr
    assert not archive.exists() or list(archive.iterdir()) == []


def test_a_fix_that_changes_nothing_is_refused_with_the_site_that_remained(tmp_path: Path):
    script = write(tmp_path, {"repro.py": BREAK, "fixed.py": FIX_THAT_FIXES_NOTHING})
    result = run_casekit(
        "capture", str(script), "--fixed", str(tmp_path / "fixed.py"), "--archive", str(tmp_path / "a")
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "gate fix (post-fix): the fix changes nothing the pre-fix showed: repro.py:5 in step (GB0170)" in result.stderr
    )
    assert not (tmp_path / "a").exists() or list((tmp_path / "a").iterdir()) == []


def test_a_sibling_import_that_was_not_included_is_named(tmp_path: Path):
    script = write(tmp_path, {"repro.py": "import torch\nimport helper\n", "helper.py": "X = 1\n"})
    result = run_casekit("capture", str(script), "--archive", str(tmp_path / "a"))
    assert result.returncode == 1
    assert error_lines(result) == [
        "casekit: error: repro.py imports `helper` from its folder: pass --include helper.py"
    ]


def test_kept_cases_are_marked_in_the_bundle_show_replay_and_validate(tmp_path: Path):
    archive = tmp_path / "cases"
    never = write(tmp_path / "never", {"repro.py": BAD_SCRIPTS["never-compiles"][0]})
    kept = run_casekit(
        "capture", str(never), "--id", "never", "--keep-failing-gates", "--archive", str(archive), "--timeout", "60"
    )
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "waived: gate compiled (pre-fix)" in kept.stderr
    clean = write(tmp_path / "clean", {"repro.py": CLEAN})
    sentinel = run_casekit("capture", str(clean), "--id", "clean", "--archive", str(archive))
    assert sentinel.returncode == 0, sentinel.stdout + sentinel.stderr
    assert "sentinel: the pre-fix compiles cleanly" in sentinel.stderr

    never_case, clean_case = Archive(archive).load("never"), Archive(archive).load("clean")
    assert never_case.capture is not None and never_case.capture.waived_gates == ["compiled"]
    assert clean_case.capture is not None and clean_case.capture.sentinel and not clean_case.capture.waived_gates
    assert clean_case.capture.timeout_s == 300.0 and clean_case.capture.run_seconds["pre.compiled"] > 0
    tensors = clean_case.observations["pre"].calls[0].tensors
    assert [(t.dtype, t.shape, t.device, t.strides, t.contiguous) for t in tensors] == [
        ("float32", [3], "cpu", [1], True)
    ]
    assert "kept as: waived: compiled" in run_casekit("show", "never", "--archive", str(archive)).stdout
    assert "kept as: sentinel" in run_casekit("show", "clean", "--archive", str(archive)).stdout
    assert run_casekit("validate", "--archive", str(archive)).returncode == 0

    replayed = run_casekit("replay", "--archive", str(archive), "--python", sys.executable, "--no-record")
    assert "never [waived: compiled]" in replayed.stdout and "clean [sentinel]" in replayed.stdout

    # the same observations without the waiver break a gate: validate says so in one line
    bundle = archive / "never.toml"
    bundle.write_text(bundle.read_text().replace('waived_gates = [\n    "compiled",\n]', "waived_gates = []"))
    invalid = run_casekit("validate", "--archive", str(archive))
    assert invalid.returncode == 1
    flagged = [line for line in invalid.stdout.splitlines() if "never.toml" in line]
    assert len(flagged) == 1 and "gate compiled (pre-fix)" in flagged[0]
    assert_portable(archive)


# ---------------------------------------------------------------- multi-file repros

TWO_FILE_REPRO = {
    "repro.py": """\
import json

import torch

from helper import scale_by
from models.blocks import Block

config = json.load(open("data/config.json"))  # relative to the script's folder, as `python repro.py` runs
block = torch.compile(Block(config["width"]))
x = torch.ones(2, config["width"])
out = block(scale_by(x, config["scale"]))
print("result", round(out.sum().item(), 4))
""",
    "helper.py": "def scale_by(x, factor):\n    return x * factor\n",
    "models/__init__.py": "",
    "models/blocks.py": """\
import torch


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width

    def forward(self, x):
        y = x.sin()
        print("inside forward")  # a graph break inside the helper package
        return y * self.width
""",
    "data/config.json": json.dumps({"width": 4, "scale": 3.0}),
}


def plain_run(script: Path) -> str:
    """What `python repro.py` prints, run from the script's folder."""
    done = subprocess.run(
        [sys.executable, script.name], cwd=script.parent, capture_output=True, text=True, timeout=300, check=True
    )
    return next(line for line in done.stdout.splitlines() if line.startswith("result"))


@pytest.fixture(scope="module")
def multi_file_case(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("multi")
    script = write(folder / "src", TWO_FILE_REPRO)
    expected = plain_run(script)
    archive = folder / "cases"
    missing = run_casekit("capture", str(script), "--id", "multi", "--archive", str(archive))
    assert missing.returncode == 1 and "pass --include helper.py" in missing.stderr
    assert "pass --include models" in missing.stderr and "pass --include data/config.json" in missing.stderr
    captured = run_casekit(
        "capture",
        "repro.py",
        "--id",
        "multi",
        "--include",
        "helper.py",
        "--include",
        "models",
        "--include",
        "data/config.json",
        "--archive",
        str(archive),
        cwd=script.parent,
    )
    assert captured.returncode == 0, captured.stdout + captured.stderr
    return archive, expected


def test_a_multi_file_repro_is_embedded_and_captured_like_a_plain_run(multi_file_case: tuple[Path, str]):
    archive, expected = multi_file_case
    case = load_case(archive / "multi.toml")
    assert [f.path for f in case.includes] == [
        "data/config.json",
        "helper.py",
        "models/__init__.py",
        "models/blocks.py",
    ]
    pre = case.observations["pre"]
    assert pre.status.value == "ok" and expected in pre.stdout_tail
    assert [(s.file, s.line) for s in pre.sites] == [("models/blocks.py", 11)]
    assert_portable(archive)
    assert tomllib.loads((archive / "multi.toml").read_text())["capture"]["timeout_s"] == 300.0


def replay_on(spec: TargetSpec, archive: Path) -> None:
    case = Archive(archive).load("multi")
    report = replay([case], [spec], ReplayOptions(record=False), None, make_runner, lambda _: None)
    run = report.targets[0]
    assert run.error is None, run.error
    (result,) = run.results
    pre = result.scripts["pre"]
    assert pre.status.value == "ok", pre.observation.detail
    assert result.verdict == "unchanged", result.reasons
    assert case.observations["pre"].stdout_tail.strip() in pre.observation.stdout_tail


def test_a_multi_file_repro_replays_on_the_python_runner(multi_file_case: tuple[Path, str]):
    replay_on(TargetSpec(runner="python", python=sys.executable), multi_file_case[0])


@pytest.mark.skipif(not any(LOCAL_WHEELS.glob("torch-2.13.0*.whl")), reason="no local torch 2.13.0 wheel")
def test_a_multi_file_repro_replays_on_the_venv_runner(multi_file_case: tuple[Path, str]):
    replay_on(TargetSpec(runner="venv", torch="2.13.0", find_links=str(LOCAL_WHEELS)), multi_file_case[0])


@pytest.mark.docker
def test_a_multi_file_repro_replays_on_the_docker_runner(multi_file_case: tuple[Path, str]):
    from .docker_fixtures import docker_engine, torch_spec

    docker_engine()
    replay_on(torch_spec(), multi_file_case[0])


# ---------------------------------------------------------------- portable archives


def test_no_bundle_in_the_repository_names_a_folder_of_this_machine():
    bundles = sorted((ROOT / "cases").glob("*.toml"))
    assert len(bundles) >= 8
    for bundle in bundles:
        assert machine_paths_in(bundle.read_text()) == [], bundle
        case = load_case(bundle)
        assert "python_executable" not in case.environment
        assert case.provenance is None or "/" not in (case.provenance.repo or "")


EXITS_UNDER_COMPILE = (
    "import sys\nimport torch\n\n\ndef step(x):\n    if x.sum() > 0:\n        return x * 2\n    return x\n\n\n"
    "compiled = torch.compile(step, fullgraph=True)\ntry:\n    compiled(torch.ones(3))\n"
    "except Exception:\n    sys.exit(0)  # only reached under compile\n"
)


def test_a_script_that_swallows_its_compile_error_and_exits_is_filed_as_the_crash_it_is(tmp_path: Path):
    """fullgraph=True raises, the script catches it and leaves with sys.exit(0): the compiled run stopped early,
    where the eager run ran to its end. That is the crash under compile the case documents, not an "ok" run
    (it was 'ok' with 0 calls compared) and not one graph under fullgraph=True."""
    script = write(tmp_path / "src", {"repro.py": EXITS_UNDER_COMPILE})
    archive = tmp_path / "cases"
    result = run_casekit("capture", str(script), "--archive", str(archive))
    assert result.returncode == 0, result.stdout + result.stderr
    pre = Archive(archive).load("repro").observations[ScriptRole.PRE]
    assert pre.status is ScriptStatus.COMPILE_ERROR
    assert "stopped early with sys.exit(0) at repro.py:15, where the eager run ran to its end" in pre.detail
    assert pre.fullgraph_status is FullgraphStatus.ERROR


TWO_KEPT_BY_FULLGRAPH = """\
import torch


def step(x):
    scale = x.abs().max().item()  # a value back to Python: a break, unless fullgraph=True keeps it
    picked = x[torch.nonzero(x > 0, as_tuple=True)]  # a data-dependent shape: the same
    return x / scale + picked.sum()


compiled = torch.compile(step)
torch.manual_seed(0)
for _ in range(3):
    out = compiled(torch.randn(16))
print(out.shape)
"""


def test_the_summary_says_why_fullgraph_compiles_one_graph_where_the_default_run_breaks(tmp_path: Path):
    """On torch 2.13 the default run breaks on `.item()` and `nonzero` while fullgraph=True compiles one
    graph: the summary says why (fullgraph=True keeps both in its graph, as the two capture_* settings would),
    names each recompile's compile id as one, and says which float value changed. The reason it gives is
    checked for real: replayed with the two settings on, both breaks are gone."""
    script = write(tmp_path / "src", {"repro.py": TWO_KEPT_BY_FULLGRAPH})
    archive = tmp_path / "cases"
    result = run_casekit("capture", str(script), "--archive", str(archive), "--id", "kept")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "graph breaks 2" in next(line for line in lines if "graph breaks" in line)
    [fullgraph] = [line.strip() for line in lines if line.strip().startswith("fullgraph=True:")]
    assert fullgraph.startswith("fullgraph=True: compiles as one graph, though the default run breaks 2 time(s): ")
    assert "the value `.item()` returns at repro.py:5 (as capture_scalar_outputs=True would)" in fullgraph
    assert "at repro.py:6 (as capture_dynamic_output_shape_ops=True would)" in fullgraph
    recompiles = [line.strip() for line in lines if line.strip().startswith("recompile:")]
    assert recompiles and all("failed: " in line and "guard of compile [" in line for line in recompiles)
    assert any("recompiled because the value `.item()` returned at repro.py:5 changed" in line for line in recompiles)
    assert not any(": 1/0: " in line or ": 2/0: " in line for line in recompiles)  # no compile id read as a fraction
    settings = ["--dynamo", "capture_scalar_outputs=True", "--dynamo", "capture_dynamic_output_shape_ops=True"]
    replayed = run_casekit("replay", "--archive", str(archive), "--python", sys.executable, *settings, "--json", "-")
    assert replayed.returncode == 0, replayed.stderr
    [result_entry] = json.loads(replayed.stdout)["results"]
    assert sorted(site["class"] for site in result_entry["scripts"]["pre"]["sites"]) == ["gone", "gone"]
