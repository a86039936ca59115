"""The perf surfaces on real torch, from the command line: capture --perf keeps the timing in the bundle and
show prints it; replay --perf --record adds it to the history, and report draws it (HTML with its spread,
JUnit red at --fail-on warn, the Markdown step summary); bisect --perf refuses ends that do not differ and
finds the first slower release over three interpreters.

The targets are interpreters over a real torch with a small library of our own, `heavylib`, installed
beside it from a wheel built here: 1.0's op is one matrix product, 2.0's twelve. A change that large
(several times the steady state) is told apart on a loaded 2-core machine; nothing smaller is asserted.
The scripts compile with the `eager` backend: Inductor's cold compile is not what these tests are about.
"""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from casekit.bundle import load_case
from casekit.model import PerfAxis, PerfVerdict, ScriptRole
from tests.conftest import run_casekit
from tests.wheels import build_wheel, env_over, install_wheel

pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROUNDS = {"1.0": 1, "2.0": 12}  # matrix products per call of heavylib.op
STEP = """import torch
import heavylib


@torch.compile(backend="eager")
def step(x):
    return heavylib.op(x) + 1


x = torch.randn(128, 128) / 10
for _ in range(3):
    step(x)
"""
REPEATS = ("--perf-repeats", "cold=1,warm=4")


def heavylib(version: str) -> str:
    return (
        "import torch\n\n\ndef op(x):\n    y = x\n"
        f"    for _ in range({ROUNDS[version]}):\n        y = torch.tanh(y @ x)\n    return y\n"
    )


def env_with_heavylib(folder: Path, version: str, python: str = sys.executable) -> str:
    """An interpreter over `python`'s torch with heavylib `version` installed from its wheel."""
    made = env_over(folder / f"env-{version}", python)
    install_wheel(made, build_wheel(folder, "heavylib", version, {"heavylib/__init__.py": heavylib(version)}))
    return made


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("heavylib")
    return {version: env_with_heavylib(folder, version) for version in ROUNDS}


@pytest.fixture(scope="module")
def captured(envs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The case captured on heavylib 1.0 with --perf: its archive, and what capture said on stderr."""
    folder = tmp_path_factory.mktemp("captured")
    (folder / "step.py").write_text(STEP)
    done = run_casekit(
        "capture", str(folder / "step.py"), "--archive", str(folder / "cases"), "--id", "heavy", "--title", "heavy op",
        "--python", envs["1.0"], "--waive", "fix", "--perf", "--perf-repeats", "cold=1,warm=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "cases", done.stderr


def _archive(captured: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of the captured archive under this test's tmp_path (so its bundles are checked for machine paths)."""
    return Path(shutil.copytree(captured[0], tmp_path / "cases"))


def test_capture_perf_keeps_the_figures_in_the_bundle_and_show_prints_them(captured, tmp_path: Path) -> None:
    archive = _archive(captured, tmp_path)
    assert "perf: one target" in captured[1] and "figures only" in captured[1]  # and it says so
    case = load_case(archive / "heavy.toml")
    (timed,) = case.perf
    figures = timed.figures
    assert timed.script is ScriptRole.PRE and timed.comparison is None  # one target: figures, no verdict
    assert figures.processes == {"cold": 1, "warm": 2}
    assert figures.steady_s is not None and figures.steady_s.n == 3 and 0 < figures.steady_s.median < 0.1
    assert figures.compile_warm_s is not None and figures.compile_warm_s.n == 2
    assert figures.load.startswith("load ") and figures.structure.graphs == 1
    shown = run_casekit("show", "heavy", "--archive", str(archive))
    assert shown.returncode == 0, shown.stderr
    head = f"timed at capture on {case.created[:16].replace('T', ' ')} UTC ({figures.load}): figures only"
    assert head in shown.stdout and "heavy pre-fix: compile cold" in shown.stdout
    as_json = json.loads(run_casekit("show", "heavy", "--archive", str(archive), "--json", "-").stdout)
    assert as_json["perf"][0]["figures"]["processes"] == {"cold": 1, "warm": 2}


def test_replay_perf_records_the_timing_and_every_report_shows_it(captured, envs, tmp_path: Path) -> None:
    archive = _archive(captured, tmp_path)
    document = tmp_path / "replay.json"
    replayed = run_casekit(
        "replay", "--archive", str(archive), "--python", envs["1.0"], "--python", envs["2.0"], "--perf", *REPEATS,
        "--perf-threshold", "steady=50%", "--record", "--json", str(document),
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    light, heavy = json.loads(document.read_text())["targets"]
    history = load_case(archive / "heavy.toml").replays
    by_target = {record.target: record for record in history}
    (heavy_timed,) = by_target[heavy["label"]].perf or []
    (light_timed,) = by_target[light["label"]].perf or []
    assert light_timed.comparison is None  # the baseline: figures only
    assert heavy_timed.comparison is not None and heavy_timed.comparison.baseline == light["label"]
    steady = next(a for a in heavy_timed.comparison.axes if a.axis is PerfAxis.STEADY)
    assert steady.verdict is PerfVerdict.SLOWER, steady  # twelve matrix products against one
    assert "library heavylib 1.0 → 2.0" in heavy_timed.comparison.cause

    site = tmp_path / "site"
    reported = run_casekit(
        "report", "--archive", str(archive), "--results", str(document), "-f", "html", "-f", "junit", "-f", "md",
        "--fail-on", "warn", "--out", str(site),
    )  # fmt: skip
    assert reported.returncode == 0, reported.stderr[-2000:]
    junit = ET.fromstring((site / "junit.xml").read_text())
    (failure,) = [f for f in junit.iter("failure") if "perf:" in (f.get("message") or "")]
    assert "pre-fix steady slower +" in failure.get("message", "") and heavy["label"] in junit_suite_of(junit, failure)
    assert "past 50%" in (failure.text or "") and "(p=" in (failure.text or "")
    page = (site / "cases" / "heavy.html").read_text()
    perf = page.split('<section id="perf">', 1)[1].split("</section>", 1)[0]
    assert perf.count("<tr><td>") == 3  # each target's latest timing, and the capture's as context
    assert 'class="perf-slower"' in perf and ", n=" in perf  # a figure with its spread
    assert 'class="chart chart-perf-steady"' in page and 'class="spread"' in page
    markdown = (site / "report.md").read_text()
    assert "### Performance" in markdown and "steady slower +" in markdown

    from_history = tmp_path / "history"
    assert run_casekit("report", "--archive", str(archive), "--out", str(from_history)).returncode == 0
    timeline = (from_history / "cases" / "heavy.html").read_text().split('<section id="timeline">', 1)[1]
    drawn = timeline.split('class="chart chart-perf-steady"', 1)[1].split("</g></g>", 1)[0]
    assert drawn.count("steady per call (perf), pre: ") == 3  # the capture, then the two recorded replays


def junit_suite_of(root: ET.Element, failure: ET.Element) -> str:
    """The target (the testsuite's name) a failure belongs to."""
    for suite in root.iter("testsuite"):
        if any(found is failure for found in suite.iter("failure")):
            return suite.get("name") or ""
    return ""


def test_bisect_perf_says_in_one_line_that_the_ends_do_not_differ(captured, envs, tmp_path: Path) -> None:
    """The good end is the heavy library, the bad end the light one: the bad end is faster, never slower by
    the rule, so nothing is searched. ("2" and "2.13" both name this torch 2.13: the python runner checks
    each interpreter's torch against the version it is mapped to.)"""
    archive = _archive(captured, tmp_path)
    done = run_casekit(
        "bisect", "heavy", "--archive", str(archive), "--good", "2", "--bad", "2.13", "--python-for",
        f"2={envs['2.0']}", "--python-for", f"2.13={envs['1.0']}", "--perf", "slower:50%", "--perf-repeats", "warm=4",
        "--cache", str(tmp_path / "cache.json"),
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr[-3000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("casekit: error:")]
    (line,) = errors
    assert line.startswith("casekit: error: the ends do not differ by the rule (steady state per call slower by")
    assert " 2.13 against 2: steady " in line and " → 2.13 " in line and line.endswith("nothing to bisect")
    assert done.stdout == "" and not (tmp_path / "cache.json").exists()  # timings are never cached


@pytest.mark.torch251
def test_bisect_perf_finds_the_first_slower_release(captured, torch251_python, torch2141_python, tmp_path: Path):
    """2.5.1 with heavylib 1.0, then 2.13.0 and 2.14.1 with 2.0: the first slower release is 2.13.0."""
    archive = _archive(captured, tmp_path)
    pythons = {
        "2.5.1": env_with_heavylib(tmp_path / "251", "1.0", torch251_python),
        "2.13.0": env_with_heavylib(tmp_path / "213", "2.0"),
        "2.14.1": env_with_heavylib(tmp_path / "2141", "2.0", torch2141_python),
    }
    mapped = [word for version, python in pythons.items() for word in ("--python-for", f"{version}={python}")]
    out = tmp_path / "bisect.json"
    done = run_casekit(
        "bisect", "heavy", "--archive", str(archive), "--good", "2.5.1", "--bad", "2.14.1", *mapped,
        "--perf", "slower:50%", "--perf-repeats", "warm=4", "--json", str(out), "--cache", str(tmp_path / "c.json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert (report["last_good"], report["first_bad"], report["result"]) == ("2.5.1", "2.13.0", "regression")
    assert [(s["target"], s["outcome"], s["cached"]) for s in report["steps"]] == [
        ("2.5.1", "not slower", False),
        ("2.14.1", "slower", False),
        ("2.13.0", "slower", False),
    ]
    assert report["predicate"].startswith("steady state per call slower by at least 50% than the good end")
    assert any("not cached" in note for note in report["notes"]) and not (tmp_path / "c.json").exists()
    assert any(line.startswith("steady: slower") for line in report["changes"])
    assert "--perf --perf-threshold steady=50%" in report["reproduce"]
    assert "regression in 2.13.0" in done.stdout
