"""Slurm for real: the script `casekit plan --emit slurm` writes, submitted to a one-node cluster on localhost.

`.ci/slurm-setup.sh` starts the cluster (munged, slurmctld, slurmd on 127.0.0.1); `.ci/run` calls
it and sets CASEKIT_REQUIRE_SLURM=1, which turns the skip below into a failure. The jobs run as
whoever submits them (root here) with this checkout's casekit: the emitted script runs this
interpreter with PYTHONPATH at this checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from casekit.replay.document import read_replay_document
from casekit.replay.shard import without_volatile
from tests.conftest import ROOT, run_casekit

STARTER = ROOT / "cases"
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL")

pytestmark = pytest.mark.slow


def _cluster_problem() -> str | None:
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        if shutil.which(tool) is None:
            return f"no {tool}: apt-get install -y slurm-wlm munge, then bash .ci/slurm-setup.sh"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30, check=False)
    if "is UP" not in ping.stdout:
        return f"slurmctld is not up ({(ping.stdout + ping.stderr).strip()[:200]}): bash .ci/slurm-setup.sh"
    state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30, check=False)
    if not re.search(r"idle|mixed|allocated|completing", state.stdout):
        return f"no Slurm node is up (sinfo: {state.stdout.strip() or state.stderr.strip()}): bash .ci/slurm-setup.sh"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    problem = _cluster_problem()
    if problem:
        if os.environ.get("CASEKIT_REQUIRE_SLURM"):
            pytest.fail(f"CASEKIT_REQUIRE_SLURM is set but {problem}")
        pytest.skip(problem)


def job_state(job_id: str) -> str:
    """The job's state as slurmctld tells it (kept in memory MinJobAge seconds after it ends)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30, check=False
    )
    states = re.findall(r"JobState=(\S+)", shown.stdout)
    return ",".join(states) or "UNKNOWN"


def wait_for(job_id: str, timeout: float = 900) -> str:
    """Wait until the job (every task of an array) has finished; its final state(s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state != "UNKNOWN" and all(part in FINISHED for part in state.split(",")):
            return state
        time.sleep(1)
    subprocess.run(["scancel", job_id], timeout=30, check=False)
    raise AssertionError(f"slurm job {job_id} did not finish in {timeout:.0f} s (state {job_state(job_id)})")


def archive_of(tmp_path: Path, case_ids: list[str] | None = None) -> Path:
    archive = tmp_path / "cases"
    archive.mkdir()
    for bundle in sorted(STARTER.glob("*.toml")):
        if case_ids is None or bundle.stem in case_ids:
            shutil.copy(bundle, archive)
    return archive


def two_targets(tmp_path: Path) -> list[str]:
    """This interpreter under two labels: its path and the same through a link to its environment's folder
    (one torch, two targets). A link to the interpreter alone would be no venv: Python finds pyvenv.cfg
    beside the path it is started by, so a venv's python linked elsewhere runs without the venv's torch."""
    alias = tmp_path / "env-alias"
    alias.symlink_to(sys.prefix)
    return ["--python", sys.executable, "--python", str(alias / Path(sys.executable).relative_to(sys.prefix))]


def emit_script(tmp_path: Path, archive: Path, targets: list[str]) -> Path:
    script = tmp_path / "replay.sbatch"
    done = run_casekit(
        "plan", "--archive", str(archive), *targets, "--shards", "6", "--emit", "slurm", "--out", str(script),
        "--results-dir", str(tmp_path / "results"), "--job-name", f"casekit-test-{os.getpid()}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "shards: 6 (--shards)" in done.stdout
    text = script.read_text()
    assert f"PYTHONPATH={ROOT}" in text and sys.executable in text  # the jobs run this checkout's casekit
    return script


def submit(script: Path, *args: str) -> str:
    """`sbatch --parsable` of the script with args; the job id."""
    done = subprocess.run(
        ["sbatch", "--parsable", *args], cwd=script.parent, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def submit_all(script: Path) -> tuple[str, str]:
    """`bash replay.sbatch`, as a user submits it: the array job id and the merge job id."""
    done = subprocess.run(["bash", str(script)], cwd=script.parent, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = re.search(r"submitted array job (\d+) \(6 shards\) and merge job (\d+) \(afterany:\1\)", done.stdout)
    assert found, done.stdout
    return found.group(1), found.group(2)


def unsharded(tmp_path: Path, archive: Path, targets: list[str]) -> dict[str, object]:
    whole = tmp_path / "whole.json"
    done = run_casekit(
        "replay", "--archive", str(archive), *targets, "--no-record", "--fail-on", "never", "--json", str(whole)
    )
    assert done.returncode == 0, done.stderr
    return without_volatile(read_replay_document(whole))


def log_of(results: Path, pattern: str) -> str:
    return "\n".join(path.read_text(errors="replace") for path in sorted((results / "logs").glob(pattern)))


def test_a_slurm_array_of_six_tasks_and_its_merge_job_equal_one_replay(slurm: None, tmp_path: Path) -> None:
    """The starter archive over two targets x three shards: 6 array tasks, then the merge job
    (afterany); the merged verdicts are those of one unsharded replay."""
    archive = archive_of(tmp_path)
    targets = two_targets(tmp_path)
    script = emit_script(tmp_path, archive, targets)
    array, merge = submit_all(script)
    assert wait_for(array) == ",".join(["COMPLETED"] * 6)
    assert wait_for(merge) == "COMPLETED", log_of(tmp_path / "results", "*merge*")
    results = tmp_path / "results"
    files = sorted(results.glob("*/shard-*-of-6.json"))
    assert len(files) == 6  # one per (target, shard): each target has three shards of the six
    logs = log_of(results, f"*-{array}_*.out")
    for index in range(6):
        assert f"shard {index + 1}/6 from slurm: SLURM_ARRAY_TASK_ID={index}, CASEKIT_SHARD_COUNT=6" in logs
    merged = read_replay_document(results / "merged.json")
    assert len(merged.results) == 9 * 2
    assert without_volatile(merged) == unsharded(tmp_path, archive, targets)


def test_a_killed_array_task_is_named_by_the_merge_and_a_resubmitted_one_completes_it(
    slurm: None, tmp_path: Path
) -> None:
    archive = archive_of(tmp_path, ["item-branch", "tensor-if", "print-in-forward"])
    targets = two_targets(tmp_path)
    script = emit_script(tmp_path, archive, targets)
    results = tmp_path / "results"
    array, merge = submit_all(script)
    victim = f"{array}_1"
    deadline = time.monotonic() + 300
    state = job_state(victim)
    while state != "RUNNING":  # kill it mid-run, not before it starts (one reading a turn: it changes meanwhile)
        assert time.monotonic() < deadline, f"{victim} never ran ({state})"
        assert state in ("PENDING", "CONFIGURING", "UNKNOWN"), state
        time.sleep(0.2)
        state = job_state(victim)
    time.sleep(1.5)  # casekit is up and replaying
    subprocess.run(["scancel", victim], timeout=30, check=True)
    states = wait_for(array).split(",")
    assert sorted(states) == ["CANCELLED"] + ["COMPLETED"] * 5, states
    assert wait_for(merge) == "FAILED"
    merge_log = log_of(results, "*merge*")
    assert "missing shard 2/6 (index 1) on python:" in merge_log, merge_log
    assert len(list(results.glob("*/shard-*-of-6.json"))) == 5

    # resubmit the killed task by its index, and (a retry) shard 1 once more; then merge again
    again = submit(script, "--array=1", str(script), "shard")
    retry = submit(script, "--array=0", str(script), "shard")
    final = submit(script, f"--dependency=afterany:{again}:{retry}", str(script), "merge")
    assert wait_for(again) == "COMPLETED" and wait_for(retry) == "COMPLETED"
    assert wait_for(final) == "COMPLETED", log_of(results, "*merge*")
    final_log = (results / "logs").glob(f"*-{final}[._]*out")  # a plain sbatch names it %x-%A_%a
    text = "\n".join(p.read_text() for p in final_log)
    assert "retried: shard 1/6 (index 0) on python:" in text and "kept attempt 2" in text, text
    merged = read_replay_document(results / "merged.json")
    assert without_volatile(merged) == unsharded(tmp_path, archive, targets)


def test_a_script_planned_with_relative_paths_runs_when_submitted_from_elsewhere(slurm: None, tmp_path: Path) -> None:
    """`plan` run in the project folder with the README's relative `--archive cases --results-dir results`,
    the script submitted from another folder: the tasks find the archive and write the results where
    the plan said, and each task's time limit is the one the script states (from the plan's costs)."""
    project = tmp_path / "project"
    project.mkdir()
    archive_of(project, ["item-branch"])
    done = run_casekit(
        "plan", "--archive", "cases", "--python", sys.executable, "--shards", "2", "--emit", "slurm",
        "--out", "replay.sbatch", "--results-dir", "results", "--job-name", f"casekit-rel-{os.getpid()}",
        cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    script = project / "replay.sbatch"
    limit = re.search(r"^#SBATCH --time=(\S+)$", script.read_text(), re.M)
    assert limit, "the script sets no --time"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    submitted = subprocess.run(["bash", str(script)], cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    array, merge = re.search(r"submitted array job (\d+) .* merge job (\d+)", submitted.stdout).groups()  # type: ignore[union-attr]
    shown = subprocess.run(["scontrol", "show", "job", "-o", array], capture_output=True, text=True, timeout=30)
    assert set(re.findall(r"TimeLimit=(\S+)", shown.stdout)) == {limit.group(1)}
    assert wait_for(array) == "COMPLETED,COMPLETED"
    assert wait_for(merge) == "COMPLETED", log_of(project / "results", "*merge*")
    assert len(read_replay_document(project / "results" / "merged.json").results) == 1
    assert not (elsewhere / "results").exists()
