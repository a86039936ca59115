"""`casekit plan`: the shard plan from recorded run times, and the job files it emits (casekit.schedule).

- the plan is pure (`schedule`) and cuts exactly what `replay --shard K/N` runs on every machine;
- 10,000 cases x 8 targets fit 256 jobs with max/mean shard cost <= 1.2;
- the emitted Slurm script, Kubernetes manifest and GitHub workflow are golden files
  (regenerate with CASEKIT_UPDATE_GOLDEN=1 and review the diff);
- the Kubernetes manifest is checked against the API with the official client's models, and
  its jobs' commands run here with JOB_COMPLETION_INDEX set; the workflow passes actionlint.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from casekit.errors import CasekitError
from casekit.replay.document import read_replay_document
from casekit.replay.plan import ReplayRequest, TargetChoice, _select
from casekit.replay.shard import without_volatile
from casekit.runners.interface import TargetSpec
from casekit.schedule.emit import K8S_ARCHIVE, K8S_RESULTS, K8S_TARGETS, fill, replay_flags
from casekit.schedule.plan import PlanRequest, choose_shard_count, plan_archive, schedule
from tests.conftest import FIXTURES, ROOT, actionlint, run_casekit

GOLDEN = FIXTURES / "golden" / "schedule"
STARTER = ROOT / "cases"
TORCHES = ["2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0"]


def specs(*torches: str) -> list[TargetSpec]:
    return [TargetSpec(runner="venv", torch=torch) for torch in torches]


# ------------------------------------------------------------------ the plan


def test_ten_thousand_cases_on_eight_targets_fit_256_jobs_balanced_by_cost() -> None:
    rng = random.Random(24)
    ids = [f"case-{i:05d}" for i in range(10_000)]
    costs = {case_id: rng.lognormvariate(0.0, 1.0) for case_id in ids}  # 0.05 s .. over a minute
    plan = schedule(ids, costs, specs(*TORCHES), max_jobs=256, shard_seconds=1.0)
    assert plan.count == 256 and plan.chosen_by.startswith("capped at --max-jobs 256")
    assert plan.balance <= 1.2, plan.balance
    assert {len(plan.shards_of(label)) for label in plan.labels} == {32}
    assert sum(shard.cells for shard in plan.shards) == 80_000


@pytest.mark.parametrize(
    "total, targets, cells, max_jobs, expected",
    [
        (10.0, 8, 100, 256, 1),  # an hour of work: one shard
        (5 * 3600.0, 8, 100, 256, 8),  # 5 wanted, fewer than the targets: a divisor of 8, so targets deal evenly
        (3 * 3600.0, 8, 100, 256, 4),
        (20 * 3600.0, 8, 1000, 256, 24),  # more than the targets: a multiple of 8
        (900 * 3600.0, 8, 10**5, 256, 256),  # capped
        (900 * 3600.0, 3, 10**5, 256, 255),  # capped at a multiple of 3
        (900 * 3600.0, 8, 10**5, 6, 4),  # a limit below the targets: its largest divisor of 8
        (900 * 3600.0, 2, 5, 256, 5),  # never more shards than cells
    ],
)
def test_the_shard_count_is_chosen_from_the_costs_and_the_limit(
    total: float, targets: int, cells: int, max_jobs: int, expected: int
) -> None:
    assert choose_shard_count(total, targets, cells, max_jobs, 3600.0)[0] == expected


def test_a_plan_over_the_limit_is_refused() -> None:
    with pytest.raises(CasekitError, match="--shards 300 is more jobs than --max-jobs 256 allows"):
        schedule(["a"], {}, specs("2.13.0"), shards=300)


def test_the_plan_cuts_what_replay_runs_on_every_machine(tmp_path: Path) -> None:
    """plan's shards are the cells `replay --shard K/N` selects: one cut, computed the same way."""
    from casekit.archive.store import Archive

    archive = Archive(STARTER)
    choice = TargetChoice(pythons=(sys.executable, str(tmp_path / "alias")))
    plan = plan_archive(PlanRequest(targets=choice, shards=6), archive)
    cases, _ = archive.summaries_tolerant(history=False)
    for shard in plan.shards:
        selection = _select(ReplayRequest(targets=choice, shard=f"{shard.number}/6"), cases)
        assert selection.cells is not None and len(selection.cells) == shard.cells
        assert tuple(sorted({label for _, label in selection.cells})) == shard.targets
        assert selection.layout == plan.layout()
    assert not plan.unrecorded  # the starter bundles record their run times
    assert plan.balance <= 1.2


@pytest.mark.process
def test_the_plan_command_prints_the_cut_and_its_json(tmp_path: Path) -> None:
    done = run_casekit(
        "plan", "--archive", str(STARTER), "--torch", "2.12.1", "--torch", "2.13.0", "--shards", "4",
        "--json", str(tmp_path / "plan.json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "matrix: 9 case(s) x 2 target(s) = 18 cell(s)" in done.stdout
    assert "shards: 4 (--shards); limit 256 jobs: fits" in done.stdout
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["schema"] == "casekit.plan/1" and data["shards"] == 4
    assert data["layout"] == {"venv:torch-2.12.1": [1, 2], "venv:torch-2.13.0": [3, 4]}


# ------------------------------------------------------------------ emitted files, golden


def emit(engine: str, *extra: str, archive: Path = STARTER) -> str:
    done = run_casekit(
        "plan", "--archive", str(archive), "--torch", "2.12.1", "--torch", "2.13.0", "--shards", "4",
        "--emit", engine, "--out", "-", *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


GOLDEN_RUNS = {
    "slurm.sbatch": ("slurm", "--casekit", "casekit", "--sbatch", "--time=01:00:00", "--sbatch", "--cpus-per-task=2"),
    "k8s.yaml": ("k8s", "--registry", "registry.example/team/", "--cuda", "cu126"),
    "gha.yml": ("gha",),
}


@pytest.mark.process
@pytest.mark.parametrize("name", sorted(GOLDEN_RUNS))
def test_golden_job_files(name: str) -> None:
    text = emit(*GOLDEN_RUNS[name]).replace(str(ROOT) + "/", "")  # the Slurm script names absolute paths
    golden = GOLDEN / name
    if os.environ.get("CASEKIT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


@pytest.mark.process
def test_each_job_file_names_the_shard_count_once() -> None:
    slurm = emit("slurm", "--casekit", "casekit")
    assert slurm.count("SHARDS=4") == 1 and '--array="0-$((SHARDS - 1))"' in slurm
    gha = yaml.safe_load(emit("gha"))
    assert gha["jobs"]["replay"]["strategy"]["matrix"]["shard"] == [0, 1, 2, 3]
    step = next(s for s in gha["jobs"]["replay"]["steps"] if s.get("name") == "replay one shard")
    assert step["env"] == {
        "CASEKIT_SHARD_INDEX": "${{ strategy.job-index }}",
        "CASEKIT_SHARD_COUNT": "${{ strategy.job-total }}",
    }


def test_a_template_placeholder_never_goes_unfilled() -> None:
    with pytest.raises(ValueError, match="placeholders"):
        fill("gha.yml", summary="x")


def test_replay_flags_give_back_the_matrix() -> None:
    choice = TargetChoice(torches=("2.13",), runner="docker", cuda="cu126", allow=("gpus=all",))
    assert replay_flags(choice, ("a",)) == [
        "--torch", "2.13", "--runner", "docker", "--cuda", "cu126", "--allow", "gpus=all", "--case", "a",
    ]  # fmt: skip


@pytest.mark.process
def test_k8s_needs_images_not_local_interpreters() -> None:
    done = run_casekit("plan", "--archive", str(STARTER), "--python", sys.executable, "--emit", "k8s", "--out", "-")
    assert done.returncode == 2
    assert "--emit k8s runs each target in an image" in done.stderr


# ------------------------------------------------------------------ Kubernetes: the API's models


def k8s_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate_k8s(document: dict[str, Any]) -> list[str]:
    """What the Kubernetes API's schema (the official client's models) finds wrong with one object:
    a field it does not know or of the wrong type is lost on the way through the model, so a
    document that does not come back the same is wrong; a missing required field raises."""
    from kubernetes import client

    kinds = {
        ("batch/v1", "Job"): "V1Job",
        ("v1", "ServiceAccount"): "V1ServiceAccount",
        ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
        ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    }
    model = kinds.get((document.get("apiVersion"), document.get("kind")))
    if model is None:
        return [f"unknown apiVersion/kind {document.get('apiVersion')}/{document.get('kind')}"]
    api = client.ApiClient()
    try:
        parsed = api._ApiClient__deserialize(document, model)  # type: ignore[attr-defined]
    except (ValueError, TypeError) as error:
        return [f"{model}: {error}"]
    back = api.sanitize_for_serialization(parsed)
    return [] if back == document else [f"{model}: does not survive the model: {_first_difference(document, back)}"]


def _first_difference(given: Any, back: Any, where: str = "") -> str:
    if isinstance(given, dict) and isinstance(back, dict):
        for key in given:
            if key not in back:
                return f"{where}.{key} is not a field of the API"
            found = _first_difference(given[key], back[key], f"{where}.{key}")
            if found:
                return found
        return ""
    if isinstance(given, list) and isinstance(back, list) and len(given) == len(back):
        for index, (a, b) in enumerate(zip(given, back, strict=True)):
            found = _first_difference(a, b, f"{where}[{index}]")
            if found:
                return found
        return ""
    return "" if given == back else f"{where}: {given!r} came back as {back!r}"


@pytest.mark.process
def test_the_emitted_manifest_is_valid_kubernetes() -> None:
    pytest.importorskip("kubernetes", reason="pip install kubernetes (the official client; in casekit's [dev])")
    documents = k8s_documents(emit(*GOLDEN_RUNS["k8s.yaml"]))
    assert [validate_k8s(doc) for doc in documents] == [[]] * len(documents)
    jobs = [doc for doc in documents if doc["kind"] == "Job" and doc["spec"].get("completionMode") == "Indexed"]
    assert len(jobs) == 2  # one Indexed Job per target, each in the target's image
    assert [job["spec"]["template"]["spec"]["containers"][0]["image"] for job in jobs] == [
        "registry.example/team/casekit-replay:torch-2.12.1-cu126",
        "registry.example/team/casekit-replay:torch-2.13.0-cu126",
    ]
    for job in jobs:
        spec = job["spec"]
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert spec["backoffLimitPerIndex"] >= 1 and pod["restartPolicy"] == "Never"  # retried per index
        assert {e["name"]: e["value"] for e in container["env"]}["CASEKIT_SHARD_COUNT"] == str(spec["completions"])
        assert "--shard-from-env" in container["args"][0] and "--results-dir /casekit/results" in container["args"][0]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}  # a CUDA target asks for a GPU
    merge = next(doc for doc in documents if doc["metadata"]["name"].endswith("-merge") and doc["kind"] == "Job")
    wait = merge["spec"]["template"]["spec"]["initContainers"][0]["args"][0]
    assert all(job["metadata"]["name"] in wait for job in jobs)
    assert merge["spec"]["template"]["spec"]["containers"][0]["args"][0].count("--expect-target") == 2


@pytest.mark.process
def test_the_validator_catches_a_broken_manifest() -> None:
    """The check can fail: a misspelt field, a string where the API wants a number, a missing container name."""
    pytest.importorskip("kubernetes")
    job = next(d for d in k8s_documents(emit(*GOLDEN_RUNS["k8s.yaml"])) if d["kind"] == "Job")
    misspelt = json.loads(json.dumps(job))
    misspelt["spec"]["backofLimitPerIndex"] = misspelt["spec"].pop("backoffLimitPerIndex")
    assert "backofLimitPerIndex is not a field" in validate_k8s(misspelt)[0]
    unnamed = json.loads(json.dumps(job))
    del unnamed["spec"]["template"]["spec"]["containers"][0]["name"]
    assert validate_k8s(unnamed) and "name" in validate_k8s(unnamed)[0]
    nested = json.loads(json.dumps(job))
    nested["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    assert "volumeMount is not a field" in validate_k8s(nested)[0]


@pytest.mark.slow
def test_the_k8s_jobs_commands_run_here_with_their_completion_index(tmp_path: Path) -> None:
    """Each Indexed Job's command, run in a subprocess with JOB_COMPLETION_INDEX as the pod gets it
    (the image's paths mapped to this machine), then the merge Job's: the verdicts of one replay."""
    archive = tmp_path / "cases"
    archive.mkdir()
    for case_id in ("item-branch", "tensor-if"):
        shutil.copy(STARTER / f"{case_id}.toml", archive)
    done = run_casekit(
        "plan", "--archive", str(archive), "--torch", "2.13.0", "--shards", "2", "--emit", "k8s", "--out", "-",
        "--casekit", f"{sys.executable} -m casekit",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    documents = k8s_documents(done.stdout)
    here = {
        # the label a pod records keeps the interpreter path's last three parts; here they are others
        f"…{K8S_TARGETS}/": f"…/{tmp_path.name}/targets/",
        K8S_TARGETS: str(tmp_path / "targets"),
        K8S_ARCHIVE: str(archive),
        K8S_RESULTS: str(tmp_path / "results"),
        "/opt/casekit-venv": sys.prefix,  # the image's venv: this interpreter's
    }
    (tmp_path / "targets").mkdir()

    def local(command: str) -> str:
        for image_path, local_path in here.items():
            command = command.replace(image_path, local_path)
        return command

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (job,) = [d for d in documents if d["kind"] == "Job" and d["spec"].get("completionMode") == "Indexed"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    pod_env = {e["name"]: e["value"] for e in container["env"]}
    for index in range(job["spec"]["completions"]):
        run = subprocess.run(
            ["/bin/sh", "-c", local(container["args"][0])],
            env={**env, **pod_env, "JOB_COMPLETION_INDEX": str(index)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert f"shard {index + 1}/2 from kubernetes indexed job: JOB_COMPLETION_INDEX={index}" in run.stderr
    (merge,) = [d for d in documents if d["kind"] == "Job" and d["metadata"]["name"].endswith("-merge")]
    merged = subprocess.run(
        ["/bin/sh", "-c", local(merge["spec"]["template"]["spec"]["containers"][0]["args"][0])],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert merged.returncode == 0, merged.stderr
    target = shlex.split(local(container["args"][0]))[shlex.split(local(container["args"][0])).index("--python") + 1]
    whole = run_casekit(
        "replay", "--archive", str(archive), "--python", target, "--allow", "sandbox=none", "--no-record",
        "--fail-on", "never", "--json", str(tmp_path / "whole.json"),
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    merged, unsharded = (read_replay_document(tmp_path / name) for name in ("results/merged.json", "whole.json"))
    assert without_volatile(merged) == without_volatile(unsharded)


# ------------------------------------------------------------------ GitHub Actions


@pytest.mark.process
def test_the_emitted_workflow_passes_actionlint(tmp_path: Path) -> None:
    workflow = tmp_path / "casekit-replay.yml"
    workflow.write_text(emit("gha"), encoding="utf-8")
    assert actionlint(workflow, tmp_path) == []
    broken = tmp_path / "broken.yml"
    broken.write_text(workflow.read_text().replace("matrix.shard }}", "matrix.shards }}", 1), encoding="utf-8")
    assert any("shards" in problem for problem in actionlint(broken, tmp_path))  # the lint can fail


@pytest.mark.process
def test_the_workflow_lifts_ubuntu_2404s_user_namespace_restriction_before_the_replay(tmp_path: Path) -> None:
    """ubuntu-latest (24.04) restricts unprivileged user namespaces through AppArmor, so bwrap fails
    there ("setting up uid map: Permission denied"): the replay job lifts it first, and only where the
    switch exists. The step's script runs here with sudo recording what it would do."""
    steps = yaml.safe_load(emit("gha"))["jobs"]["replay"]["steps"]
    switch = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
    lifts = [index for index, step in enumerate(steps) if switch in step.get("run", "")]
    assert len(lifts) == 1, "the replay job has no step that lifts the AppArmor restriction"
    assert lifts[0] < [step.get("name") for step in steps].index("replay one shard")
    script = steps[lifts[0]]["run"]
    fakes = tmp_path / "bin"
    fakes.mkdir()
    (fakes / "sudo").write_text('#!/bin/sh\necho "sudo $*" >>"$SUDO_LOG"\n')
    (fakes / "sudo").chmod(0o755)
    present = tmp_path / "apparmor_restrict_unprivileged_userns"
    present.write_text("1\n")
    log = tmp_path / "sudo.log"
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "SUDO_LOG": str(log)}
    for where, expected in ((str(present), ["sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"]),
                            (str(tmp_path / "absent"), [])):  # fmt: skip
        log.write_text("")
        done = subprocess.run(
            ["bash", "-e", "-c", script.replace(switch, where)], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert log.read_text().splitlines() == expected


def test_slurms_time_limit_is_the_dearest_shard_with_its_margin_and_the_env_build() -> None:
    from casekit.schedule.emit import SLURM_SETUP_S, SLURM_TIME_MARGIN, _sets_time, slurm_time, task_time_limit

    assert [slurm_time(s) for s in (0, 59, 60, 61, 3600, 86399, 86400 + 61)] == [
        "00:01:00", "00:01:00", "00:01:00", "00:02:00", "01:00:00", "1-00:00:00", "1-00:02:00",
    ]  # fmt: skip
    plan = schedule(["a", "b", "c"], {"a": 500.0, "b": 100.0, "c": 50.0}, specs("2.13.0"), shards=2)
    assert plan.max_s == 510.0  # "a" alone, with its import
    assert task_time_limit(plan) == 510.0 * SLURM_TIME_MARGIN + SLURM_SETUP_S
    assert [_sets_time(o) for o in ("--time=1:00:00", "--time 60", "-t 60", "-t60", "--tmp=10G", "--gres=gpu:1")] == [
        True, True, True, True, False, False,
    ]  # fmt: skip


@pytest.mark.process
def test_the_slurm_script_names_absolute_paths_and_its_time_from_the_plan(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    shutil.copy(STARTER / "item-branch.toml", tmp_path / "cases")
    (tmp_path / "wheels").mkdir()
    done = run_casekit(
        "plan", "--archive", "cases", "--python", "./env/bin/python", "--python", "python3",
        "--find-links", "wheels", "--shards", "2", "--emit", "slurm", "--out", "-", "--results-dir", "out/results",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert f"ARCHIVE={tmp_path}/cases\n" in script and f"RESULTS={tmp_path}/out/results\n" in script
    assert f"#SBATCH --output={tmp_path}/out/results/logs/%x-%A_%a.out" in script
    assert f"--python {tmp_path}/env/bin/python --python python3" in script  # a name on PATH stays a name
    assert f"--find-links {tmp_path}/wheels" in script
    assert re.search(r"^#SBATCH --time=00:3\d:00$", script, re.M)  # one case: well under the set-up's 30 min
    mine = run_casekit(
        "plan", "--archive", str(tmp_path / "cases"), "--torch", "2.13.0", "--emit", "slurm", "--out", "-",
        "--sbatch", "-t 90",
    )  # fmt: skip
    assert "#SBATCH --time" not in mine.stdout and '#SBATCH "-t 90"' in mine.stdout  # the user's own limit wins


@pytest.mark.process
def test_the_next_steps_on_the_terminal_name_the_file_where_it_was_written(tmp_path: Path) -> None:
    """`plan --out jobs/replay.sbatch` then `bash replay.sbatch` (as the terminal said) finds no file: the steps
    printed name the file as --out gave it, while the file's own header names it beside itself."""
    (tmp_path / "cases").mkdir()
    shutil.copy(STARTER / "item-branch.toml", tmp_path / "cases")
    (tmp_path / "jobs").mkdir()
    said = {}
    for engine, name in (("slurm", "replay.sbatch"), ("k8s", "replay.yaml")):
        done = run_casekit(
            "plan", "--archive", "cases", "--torch", "2.13.0", "--shards", "2", "--emit", engine,
            "--out", f"jobs/{name}", cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        said[engine] = done.stdout + done.stderr
        assert (tmp_path / "jobs" / name).is_file()
    assert "  bash jobs/replay.sbatch   (submits 2 array task(s), then the merge)" in said["slurm"], said["slurm"]
    assert "3. kubectl apply -f jobs/replay.yaml" in said["k8s"], said["k8s"]
    header = (tmp_path / "jobs" / "replay.yaml").read_text()
    assert "kubectl apply -f replay.yaml" in header and "jobs/replay.yaml" not in header
    assert "bash replay.sbatch" in (tmp_path / "jobs" / "replay.sbatch").read_text()
