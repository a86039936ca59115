"""`casekit plan --emit`: every user value lands in the job file as data, in that file's language.

Each emitter gets every value it writes set to a payload at once (`$(…)`, backticks, quotes, YAML
flow syntax, `${{ secrets.X }}`, a newline), each carrying a marker of its own. The file is then
parsed the way its engine reads it: Slurm's script runs under bash with `sbatch` and casekit
replaced by recorders (and its #SBATCH lines read as sbatch reads them), the Kubernetes manifest is
loaded with yaml.safe_load and checked against the API's models and its commands run under sh, the
workflow is loaded, linted with actionlint, and its `run:` script run under bash. A marker file
appearing, or a value that comes back other than given, is an injection. Beside each: the control,
the same payload through the same emitter with the quoting (or the refusal) switched off, doing harm.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import casekit.schedule.emit as emit_module
from casekit.replay.plan import TargetChoice
from casekit.runners.interface import TargetSpec
from casekit.schedule.emit import (
    K8S_TARGETS,
    SETUP_OPTIONS,
    GitHubEmitter,
    JobSetup,
    JobValueError,
    KubernetesEmitter,
    SlurmEmitter,
    check_values,
    slurm_time,
    task_time_limit,
    user_values,
)
from casekit.schedule.plan import Schedule, schedule

from ..conftest import ROOT, actionlint, run_casekit

# Payloads: {m} becomes a marker path of the value's own; none of them may create it.
SHELL_PAYLOADS = {
    "substitution": "$(touch {m})",
    "backticks": "`touch {m}`",
    "quotes": "x'\"; touch {m}; echo \"'",
    "sbatch-syntax": 'a b "c # d \\ e',
}
YAML_PAYLOAD = "x}, {name: host, hostPath: {path: /}}, {name: y"  # a flow mapping closed early
ACTIONS_PAYLOAD = "${{ secrets.X }}"


def plan_of(*specs: TargetSpec) -> Schedule:
    return schedule(["case-a", "case-b"], {}, list(specs), shards=2)


def recorder(folder: Path) -> Path:
    """A program that appends its argv to $RECORD as a JSON line and prints a job id (for sbatch)."""
    program = folder / "record"
    program.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "with open(os.environ['RECORD'], 'a') as out:\n    out.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "print('42')\n",
        encoding="utf-8",
    )
    program.chmod(0o755)
    return program


def recorded(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def markers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("pwned-*"))


def sbatch_arguments(line: str) -> list[str]:
    """The arguments sbatch reads from one `#SBATCH` line, as slurm's src/sbatch/opt.c (_get_argument)
    reads them: words split on blanks, double quotes group, a backslash escapes, a bare '#' ends the line."""
    words, word, quoted, escaped, started = [], [], False, False, False
    for char in line.removeprefix("#SBATCH"):
        if escaped:
            word.append(char)
            escaped, started = False, True
        elif char == "\\":
            escaped = True
        elif quoted:
            if char == '"':
                quoted = False
            else:
                word.append(char)
        elif char == '"':
            quoted = started = True
        elif char == "#":
            break
        elif char.isspace():
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(char)
            started = True
    if started:
        words.append("".join(word))
    return words


def protection_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emitters as they were: values pasted raw, nothing refused."""
    for name in ("shell_word", "sbatch_word", "yaml_value"):
        monkeypatch.setattr(emit_module, name, str)
    monkeypatch.setattr(emit_module, "yaml_comment", str)
    monkeypatch.setattr(emit_module, "check_values", lambda values, engine: None)
    monkeypatch.setattr(emit_module.shlex, "join", " ".join)


# ------------------------------------------------------------------ every value is checked


def test_every_setup_field_names_its_option() -> None:
    """A new JobSetup field must say which option it comes from, so its refusal can name it."""
    assert {field.name for field in dataclasses.fields(JobSetup)} == set(SETUP_OPTIONS)


CONTROL_CHARACTERS = ["\n", "\r", "\x00", "\x1b", "\x85", "\u2028", "\u2029", "\u202e"]  # NEL, LS, PS: YAML line ends


def _with(char: str, value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_with(char, item) for item in value)
    return value.replace("{c}", char) if isinstance(value, str) else {k: _with(char, v) for k, v in value.items()}


def refusal(given: dict[str, Any], char: str, engine: str) -> str:
    setup = JobSetup(**_with(char, given.get("setup", {})))
    choice = TargetChoice(torches=("2.13.0",), **_with(char, given.get("choice", {})))
    with pytest.raises(JobValueError) as raised:
        check_values(user_values(choice, _with(char, given.get("case_ids", ())), setup), engine)
    return str(raised.value)


@pytest.mark.parametrize(
    "given, option",
    [
        ({"setup": {"name": "job{c}x"}}, "--job-name"),
        ({"setup": {"results": "res{c}ults"}}, "--results-dir"),
        ({"setup": {"archive": "ca{c}ses"}}, "--archive"),
        ({"setup": {"sbatch": ("--time=1{c}touch /tmp/x",)}}, "--sbatch"),
        ({"setup": {"claim": "cl{c}aim"}}, "--claim"),
        ({"setup": {"registry": "reg{c}istry/"}}, "--registry"),
        ({"setup": {"file": "job{c}.yml"}}, "--out"),
        ({"setup": {"casekit": ("casekit", "--x{c}y")}}, "--casekit"),
        ({"setup": {"fail_on": "er{c}ror"}}, "--fail-on"),
        ({"choice": {"allow": ("gpus=a{c}b",)}}, "--allow"),
        ({"choice": {"index_url": "http://x{c}y/"}}, "--index-url"),
        ({"case_ids": ("ca{c}se",)}, "--case"),
    ],
)
@pytest.mark.parametrize("engine", ["slurm", "k8s", "gha"])
def test_a_newline_in_any_value_is_refused_in_one_line_naming_its_option(
    engine: str, given: dict[str, Any], option: str
) -> None:
    message = refusal(given, "\n", engine)
    assert message.startswith(f"{option} ") and "U+000A" in message and "\n" not in message


@pytest.mark.parametrize("char", CONTROL_CHARACTERS)
def test_every_control_character_is_refused(char: str) -> None:
    assert f"U+{ord(char):04X}" in refusal({"setup": {"results": "res{c}ults"}}, char, "slurm")


def test_actions_expressions_are_refused_in_a_workflow_only() -> None:
    choice = TargetChoice(torches=("2.13.0",), allow=(f"gpus={ACTIONS_PAYLOAD}",))
    with pytest.raises(JobValueError, match=r"^--allow .*GitHub Actions would evaluate '\$\{\{'"):
        check_values(user_values(choice, (), JobSetup()), "gha")
    check_values(user_values(choice, (), JobSetup()), "slurm")  # bash reads it as text: quoted, it is data


@pytest.mark.process
def test_the_plan_command_refuses_a_newline_in_one_line(tmp_path: Path) -> None:
    done = run_casekit(
        "plan", "--archive", str(ROOT / "cases"), "--torch", "2.13.0", "--emit", "slurm",
        "--job-name", "x\ntouch /tmp/pwned", "--out", str(tmp_path / "job.sbatch"),
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("casekit: error: --job-name 'x\\ntouch /tmp/pwned'")
    assert not (tmp_path / "job.sbatch").exists()


# ------------------------------------------------------------------ Slurm


def slurm_file(tmp_path: Path, payload: str) -> tuple[str, dict[str, str]]:
    """The Slurm script with every value set to `payload` (its marker named after the value)."""
    values = {
        name: payload.replace("{m}", str(tmp_path / f"pwned-{name}"))
        for name in ("name", "results", "archive", "file", "sbatch", "allow", "index", "case", "casekit", "path")
    }
    setup = JobSetup(
        archive=values["archive"],
        results=values["results"],
        casekit=(str(recorder(tmp_path)), values["casekit"]),
        environment=(("PYTHONPATH", values["path"]),),
        name=values["name"],
        file=values["file"],
        sbatch=(f"--comment={values['sbatch']}",),
    )
    choice = TargetChoice(torches=("2.13.0",), allow=(f"gpus={values['allow']}",), index_url=values["index"])
    text = SlurmEmitter().emit(plan_of(TargetSpec(runner="venv", torch="2.13.0")), choice, (values["case"],), setup)
    return text, values


def run_slurm(tmp_path: Path, text: str) -> list[list[str]]:
    """The script's three modes under bash, with sbatch and casekit recording their arguments."""
    script = tmp_path / "job.sbatch"
    script.write_text(text, encoding="utf-8")
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "sbatch").symlink_to(recorder(tmp_path))
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "RECORD": str(tmp_path / "calls.jsonl")}
    for mode in ("submit", "shard", "merge"):
        subprocess.run(["bash", str(script), mode], cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False)
    return recorded(tmp_path / "calls.jsonl")


@pytest.mark.process
@pytest.mark.parametrize("payload", sorted(SHELL_PAYLOADS))
def test_slurm_values_stay_data_for_bash_and_for_sbatch(tmp_path: Path, payload: str) -> None:
    text, values = slurm_file(tmp_path, SHELL_PAYLOADS[payload])
    syntax = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    calls = run_slurm(tmp_path, text)
    assert markers(tmp_path) == []
    submit_array, submit_merge, shard, merge = calls
    assert f"--job-name={values['name']}-merge" in submit_merge
    assert f"--output={values['results']}/logs/%x-%j.out" in submit_merge
    assert shard[:4] == [values["casekit"], "replay", "--archive", values["archive"]]
    assert shard[shard.index("--allow") + 1] == f"gpus={values['allow']}"
    assert shard[shard.index("--index-url") + 1] == values["index"]
    assert shard[shard.index("--case") + 1] == values["case"]
    assert shard[shard.index("--results-dir") + 1] == values["results"]
    assert merge[:2] == [values["casekit"], "merge"] and merge[2] == values["results"]
    directives = [sbatch_arguments(line) for line in text.splitlines() if line.startswith("#SBATCH")]
    limit = slurm_time(task_time_limit(plan_of(TargetSpec(runner="venv", torch="2.13.0"))))
    assert directives == [
        [f"--job-name={values['name']}"],
        [f"--output={values['results']}/logs/%x-%A_%a.out"],
        [f"--time={limit}"],  # from the plan's costs: the user gave none
        [f"--comment={values['sbatch']}"],
    ]
    assert submit_array[-1] == "shard" and "--array=0-1" in submit_array


@pytest.mark.process
def test_control_pasted_raw_the_slurm_values_run_as_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    protection_off(monkeypatch)
    text, _ = slurm_file(tmp_path, SHELL_PAYLOADS["substitution"])
    run_slurm(tmp_path, text)
    assert {"pwned-name", "pwned-archive", "pwned-case", "pwned-allow"} <= set(markers(tmp_path))


@pytest.mark.process
def test_control_a_newline_in_an_sbatch_option_is_a_shell_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    protection_off(monkeypatch)
    setup = JobSetup(sbatch=(f"--time=1\ntouch {tmp_path / 'pwned-sbatch'}",), casekit=(str(recorder(tmp_path)),))
    text = SlurmEmitter().emit(plan_of(TargetSpec(runner="venv", torch="2.13.0")), TargetChoice(), (), setup)
    run_slurm(tmp_path, text)
    assert markers(tmp_path) == ["pwned-sbatch"]


# ------------------------------------------------------------------ Kubernetes


def k8s_file(tmp_path: Path, payload: str, image: str | None = None) -> tuple[str, dict[str, str]]:
    values = {
        name: payload.replace("{m}", str(tmp_path / f"pwned-{name}"))
        for name in ("claim", "results", "archive", "registry", "allow", "case", "fail_on", "file", "image")
    }
    setup = JobSetup(
        archive=values["archive"],
        results=values["results"],
        casekit=(str(recorder(tmp_path)),),
        claim=values["claim"],
        registry=values["registry"],
        fail_on=values["fail_on"],
        file=values["file"],
        name=values["claim"],
    )
    choice = TargetChoice(allow=(f"gpus={values['allow']}",))
    specs = (TargetSpec(runner="docker", torch="2.13.0", image=image or values["image"]),)
    specs += (TargetSpec(runner="docker", torch="2.12.1"),)  # its image from --registry
    return KubernetesEmitter().emit(plan_of(*specs), choice, (values["case"],), setup), values


def k8s_volumes(documents: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [doc["spec"]["template"]["spec"]["volumes"] for doc in documents if doc["kind"] == "Job"]


@pytest.mark.process
@pytest.mark.parametrize("payload", sorted(SHELL_PAYLOADS) + ["yaml"])
def test_k8s_values_stay_data_for_yaml_the_api_and_sh(tmp_path: Path, payload: str) -> None:
    pytest.importorskip("kubernetes")
    from ..test_schedule import validate_k8s

    text, values = k8s_file(tmp_path, YAML_PAYLOAD if payload == "yaml" else SHELL_PAYLOADS[payload])
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    assert [doc["kind"] for doc in documents] == ["ServiceAccount", "Role", "RoleBinding", "Job", "Job", "Job"]
    assert [validate_k8s(doc) for doc in documents] == [[]] * len(documents)
    for volumes in k8s_volumes(documents):
        assert [volume["name"] for volume in volumes] in (["work", "targets", "scratch"], ["work", "scratch"])
        assert volumes[0]["persistentVolumeClaim"] == {"claimName": values["claim"]}
        assert not any("hostPath" in volume for volume in volumes)
    replay_jobs = documents[3:5]
    images = [job["spec"]["template"]["spec"]["containers"][0]["image"] for job in replay_jobs]
    assert sorted(images) == sorted([values["image"], values["registry"] + "casekit-replay:torch-2.12.1-cpu"])
    mounts = replay_jobs[0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert [mount.get("subPath") for mount in mounts[:2]] == [values["archive"], values["results"]]
    record = tmp_path / "calls.jsonl"
    (tmp_path / "targets").mkdir()
    for job in documents[3:]:
        for container in job["spec"]["template"]["spec"]["containers"]:
            command = container["args"][0].replace(K8S_TARGETS, str(tmp_path / "targets"))
            subprocess.run(["sh", "-c", command], env={**os.environ, "RECORD": str(record)}, timeout=60, check=False)
    assert markers(tmp_path) == []
    shard_a, shard_b, merge = recorded(record)
    for shard in (shard_a, shard_b):
        assert shard[shard.index("--allow", shard.index("sandbox=none")) + 1] == f"gpus={values['allow']}"
        assert shard[shard.index("--case") + 1] == values["case"]
    assert merge[merge.index("--fail-on") + 1] == values["fail_on"]


def test_control_pasted_raw_a_claim_mounts_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim in its flow mapping, unquoted and unchecked, closes it and adds a hostPath volume of /."""
    monkeypatch.setattr(emit_module, "yaml_value", str)
    monkeypatch.setattr(emit_module, "check_values", lambda values, engine: None)
    claim = "x}\n        - name: host\n          hostPath: {path: /, type: Directory"
    plan = plan_of(TargetSpec(runner="docker", torch="2.13.0", image="registry.example/replay:1"))
    text = KubernetesEmitter().emit(plan, TargetChoice(), (), JobSetup(claim=claim))
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    assert any(
        volume.get("hostPath") == {"path": "/", "type": "Directory"} for v in k8s_volumes(documents) for volume in v
    )


@pytest.mark.process
def test_control_pasted_raw_a_k8s_command_runs_the_substitution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    protection_off(monkeypatch)
    text, _ = k8s_file(tmp_path, SHELL_PAYLOADS["substitution"], image="registry.example/replay:1")
    (tmp_path / "targets").mkdir()
    for job in [doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] == "Job"]:
        command = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
        command = command.replace(K8S_TARGETS, str(tmp_path / "targets"))
        subprocess.run(
            ["sh", "-c", command], env={**os.environ, "RECORD": str(tmp_path / "r")}, timeout=60, check=False
        )
    assert {"pwned-allow", "pwned-case", "pwned-fail_on"} <= set(markers(tmp_path))


def test_control_a_newline_in_the_file_name_breaks_out_of_the_k8s_comment(monkeypatch: pytest.MonkeyPatch) -> None:
    protection_off(monkeypatch)
    setup = JobSetup(file="job.yaml\n---\nkind: Pod\nspec: {hostPID: true}\n---\n#")
    text = KubernetesEmitter().emit(plan_of(TargetSpec(runner="docker", torch="2.13.0")), TargetChoice(), (), setup)
    assert {"kind": "Pod", "spec": {"hostPID": True}} in list(yaml.safe_load_all(text))  # a document of its own


# ------------------------------------------------------------------ GitHub Actions


def gha_file(tmp_path: Path, payload: str, make: Callable[[], GitHubEmitter] = GitHubEmitter) -> tuple[str, dict]:
    values = {name: payload.replace("{m}", str(tmp_path / f"pwned-{name}")) for name in ("archive", "allow", "case")}
    setup = JobSetup(archive=values["archive"], fail_on="error")
    choice = TargetChoice(torches=("2.13.0",), allow=(f"gpus={values['allow']}",))
    text = make().emit(plan_of(TargetSpec(runner="venv", torch="2.13.0")), choice, (values["case"],), setup)
    return text, values


def replay_step(workflow: dict[str, Any]) -> dict[str, Any]:
    return next(step for step in workflow["jobs"]["replay"]["steps"] if step.get("name") == "replay one shard")


def run_step(tmp_path: Path, workflow: dict[str, Any]) -> list[list[str]]:
    """The replay step's `run:` under bash, as the runner runs it (the workflow's env set), casekit recording."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "casekit").symlink_to(recorder(tmp_path))
    env = {
        **os.environ,
        **{name: str(value) for name, value in workflow["env"].items()},
        "PATH": f"{fake}:{os.environ['PATH']}",
        "RECORD": str(tmp_path / "calls.jsonl"),
    }
    step = replay_step(workflow)
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, timeout=60, check=False)
    return recorded(tmp_path / "calls.jsonl")


@pytest.mark.process
@pytest.mark.parametrize("payload", sorted(SHELL_PAYLOADS) + ["yaml"])
def test_workflow_values_stay_data_for_yaml_actions_and_bash(tmp_path: Path, payload: str) -> None:
    text, values = gha_file(tmp_path, YAML_PAYLOAD if payload == "yaml" else SHELL_PAYLOADS[payload])
    workflow = yaml.safe_load(text)
    assert workflow["env"]["CASEKIT_ARCHIVE"] == values["archive"]
    assert [step.get("name") or step.get("uses") for step in workflow["jobs"]["replay"]["steps"]][-2:] == [
        "replay one shard",
        "actions/upload-artifact@v4",
    ]
    (call,) = run_step(tmp_path, workflow)
    assert markers(tmp_path) == []
    assert call[:3] == ["replay", "--archive", values["archive"]]
    assert call[call.index("--allow") + 1] == f"gpus={values['allow']}"
    assert call[call.index("--case") + 1] == values["case"]
    workflow_file = tmp_path / "casekit-replay.yml"
    workflow_file.write_text(text, encoding="utf-8")
    assert actionlint(workflow_file, tmp_path) == []


@pytest.mark.process
def test_control_pasted_raw_workflow_values_run_and_an_expression_reaches_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    protection_off(monkeypatch)
    text, _ = gha_file(tmp_path, SHELL_PAYLOADS["substitution"])
    run_step(tmp_path, yaml.safe_load(text))
    assert {"pwned-allow", "pwned-case"} <= set(markers(tmp_path))
    text, _ = gha_file(tmp_path, ACTIONS_PAYLOAD)
    assert ACTIONS_PAYLOAD in replay_step(yaml.safe_load(text))["run"]  # evaluated by Actions before bash runs


def test_control_a_newline_in_a_flag_adds_a_workflow_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quoted for bash but not refused, a newline ends the `run: |` block: the rest is a step of its own."""
    monkeypatch.setattr(emit_module, "check_values", lambda values, engine: None)
    case = "x\n      - run: |\n          echo injected #"
    text = GitHubEmitter().emit(plan_of(TargetSpec(runner="venv", torch="2.13.0")), TargetChoice(), (case,), JobSetup())
    steps = yaml.safe_load(text)["jobs"]["replay"]["steps"]
    assert any(step.get("run", "").startswith("echo injected") for step in steps)


def test_plain_values_are_written_as_they_read() -> None:
    """Quoting only what needs it: plain values read as before (the golden files hold them)."""
    setup = JobSetup(name="casekit-replay", results="results", sbatch=("--gres=gpu:1",), casekit=("casekit",))
    slurm = SlurmEmitter().emit(plan_of(TargetSpec(runner="venv", torch="2.13.0")), TargetChoice(), (), setup)
    assert "#SBATCH --job-name=casekit-replay\n" in slurm and "#SBATCH --gres=gpu:1\n" in slurm
    assert "--job-name=casekit-replay-merge " in slurm and "RESULTS=results\n" in slurm
