"""The docker runner's claims under the same attacks as the bubblewrap sandbox, on a real engine.

Network by every route against a listener on the host's loopback, and daemons that try to outlive
their run; then what one script can do to the others in the one container of a batch, where each
run is an unprivileged uid of its own below a root probe (batch.UidIsolation): signal every process,
forge results, leave files for the next run, lie through a forked child, fill the disk, nest folders
past the stack, read the host's environment. Each attack has its control, the same script with the
protection off reaching what it aimed at, so these tests can fail.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from casekit.runners import batch as batch_module
from casekit.runners.batch import UidIsolation
from casekit.runners.docker.runner import RUN_UIDS, DockerRunner
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProbeScheduling

from ..docker_fixtures import torch_spec
from .conftest import SCRIPTS, Listener
from .procs import wait_unmarked

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# Bounds a test that fails by stalling the probe (the default is the jobs' timeouts and then some).
WALL_S = "240"


@pytest.fixture
def client(engine: Any, replay_image: Any) -> Any:  # noqa: F811
    """The engine, once the torch 2.13.0 replay image is there."""
    return engine


def eager(result: Any, job_id: str) -> dict:
    return result.results[job_id]["runs"]["eager"]


def job(name: str, script: str, *argv: str, timeout: float = 120) -> ProbeJob:
    return ProbeJob(f"{name}.pre", SCRIPTS / script, modes=("eager",), timeout=timeout, argv=argv)


def run_in_docker(
    client: Any, jobs: list[ProbeJob], parallel: int = 1, options: tuple[tuple[str, str], ...] = ()
) -> ProbeBatchResult:
    runner = DockerRunner(torch_spec(options=(("timeout", WALL_S), *options)), client=client)
    runner.scheduling = ProbeScheduling(parallel_runs=parallel)
    return runner.run_probe(jobs, lambda line: None)


def said(batch: ProbeBatchResult, job_id: str, tag: str) -> dict:
    run = eager(batch, job_id)
    line = next((x for x in run["stdout_tail"].splitlines() if x.startswith(tag + " ")), None)
    assert line is not None, f"{tag} not printed: status {run['status']}, stderr {run.get('stderr_tail', '')[-800:]}"
    return json.loads(line.split(" ", 1)[1])


def intact(batch: ProbeBatchResult, job_id: str) -> bool:
    run = eager(batch, job_id) if job_id in batch.results else {}
    return run.get("status") == "ok" and "VICTIM INTACT" in run.get("stdout_tail", "")


def isolation_changed(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """The runner's request with one protection taken out (the control of what it stops)."""
    monkeypatch.setattr(DockerRunner, "run_isolation", lambda self: replace(UidIsolation(), **changes))


def patched_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """Run a copy of the probe with one protection taken out (the control of a probe-side guard)."""
    text = batch_module.PROBE_PATH.read_text()
    assert old in text
    copy = tmp_path / "probe.py"
    copy.write_text(text.replace(old, new))
    monkeypatch.setattr(batch_module, "PROBE_PATH", copy)


def test_docker_blocks_every_route_and_kills_daemons(
    client: Any,
    loopback_listener: Listener,
) -> None:
    token = f"casekit-docker-daemon-{uuid.uuid4().hex}"
    jobs = [
        ProbeJob("net.pre", SCRIPTS / "network_routes.py", modes=("eager",), argv=(str(loopback_listener.port),)),
        ProbeJob("daemons.pre", SCRIPTS / "daemons.py", modes=("eager",), argv=(token,)),
        ProbeJob("hang.pre", SCRIPTS / "daemons.py", modes=("eager",), argv=(token, "hang"), timeout=10),
        ProbeJob("census.pre", SCRIPTS / "census.py", modes=("eager",), argv=(token,)),
    ]
    result = DockerRunner(torch_spec(), client=client).run_probe(jobs, lambda line: None)
    run = eager(result, "net.pre")
    line = next(x for x in run["stdout_tail"].splitlines() if x.startswith("CASEKIT-NET "))
    report = json.loads(line.split(" ", 1)[1])
    assert loopback_listener.contacts == []
    assert report["interfaces"] == ["lo"]
    for route, outcome in report["outcomes"].items():
        if route != "udp_sendto":
            assert outcome.startswith("blocked"), (route, outcome)
    assert "daemons started" in eager(result, "daemons.pre")["stdout_tail"]
    assert eager(result, "hang.pre")["status"] == "timeout"
    assert "CASEKIT-CENSUS 0" in eager(result, "census.pre")["stdout_tail"]  # gone after each run, not only at the end
    assert wait_unmarked(token, within=10) == []


# ------------------------------------------------------------------ one script cannot sink the others


def overlapped(batch: ProbeBatchResult, one: str, other: str) -> bool:
    """`other` ran while `one` was running (the attack met its victim alive). Two workers start their
    first runs at the same moment, in either order: the two runs' intervals overlap, whichever began first."""
    a, b = eager(batch, one), eager(batch, other)
    return max(a["started"], b["started"]) < min(a["started"] + a["wall_s"], b["started"] + b["wall_s"])


@pytest.mark.parametrize("signals", [(), ("SIGSTOP",)], ids=["stop-then-kill", "stop-alone"])
def test_kill_all_and_stop_all_reach_only_the_scripts_own_uid(client: Any, signals: tuple[str, ...]) -> None:
    # the victim sleeps long enough to be alive in the other worker when the killer runs (20 s; on a machine
    # loaded enough that the killer started later than that, once more with 60 s: the attack must meet its victim)
    for sleep in ("20", "60"):
        jobs = [job("victim", "victim.py", sleep), job("killer", "kill_all.py", *signals), job("victim2", "victim.py")]
        batch = run_in_docker(client, jobs, parallel=2)
        assert batch.failed == {}
        if overlapped(batch, "victim.pre", "killer.pre"):
            break
    assert intact(batch, "victim.pre") and intact(batch, "victim2.pre")
    assert overlapped(batch, "victim.pre", "killer.pre")
    assert "CASEKIT-KILLALL SIGSTOP sent" in eager(batch, "killer.pre")["stdout_tail"]
    assert batch.wall_s is not None  # the probe lived to write done.json


def test_control_with_the_probes_uid_kill_all_takes_the_probe_down(client: Any, monkeypatch) -> None:
    isolation_changed(monkeypatch, drop=False)
    jobs = [job("victim", "victim.py", "20"), job("killer", "kill_all.py"), job("victim2", "victim.py")]
    batch = run_in_docker(client, jobs, parallel=2)
    assert "killer.pre" in batch.failed and "victim.pre" in batch.failed, batch.failed
    assert batch.wall_s is None


def test_a_script_cannot_write_out_or_another_runs_folder(client: Any) -> None:
    # the victim's run folder exists while the tamperer runs beside it
    jobs = [job("victim", "victim.py", "20"), job("tamper", "tamper.py")]
    batch = run_in_docker(client, jobs, parallel=2)
    outcomes = said(batch, "tamper.pre", "CASEKIT-TAMPER")
    assert all(outcome.startswith("blocked") for outcome in outcomes.values()), outcomes
    assert overlapped(batch, "victim.pre", "tamper.pre")
    assert batch.failed == {} and intact(batch, "victim.pre")
    assert str(batch.environment["torch"]).startswith("2.13.0")  # env.json untouched


def test_control_with_the_probes_uid_a_script_forges_a_result(client: Any, monkeypatch) -> None:
    isolation_changed(monkeypatch, drop=False)
    batch = run_in_docker(client, [job("victim", "victim.py"), job("tamper", "tamper.py")])
    assert said(batch, "tamper.pre", "CASEKIT-TAMPER")["victim_result"] == "written"
    assert "tampered with" in batch.failed["victim.pre"]


def test_nothing_a_run_leaves_in_tmp_home_or_shm_reaches_the_next(client: Any) -> None:
    # one at a time: both runs are forked by the probe itself, so they even share a uid
    batch = run_in_docker(client, [job("plant", "plant_tmp.py", "plant"), job("find", "plant_tmp.py", "look")])
    assert all(said(batch, "plant.pre", "CASEKIT-PLANT").values())
    assert not any(said(batch, "find.pre", "CASEKIT-PLANT").values())


def test_control_without_the_sweep_the_next_run_finds_the_plant(client: Any, monkeypatch) -> None:
    isolation_changed(monkeypatch, shared=())
    batch = run_in_docker(client, [job("plant", "plant_tmp.py", "plant"), job("find", "plant_tmp.py", "look")])
    found = said(batch, "find.pre", "CASEKIT-PLANT")
    assert found["/tmp/casekit-planted"] and found["/dev/shm/casekit-planted"], found


def test_a_forked_child_cannot_write_its_parents_result(client: Any) -> None:
    run = eager(run_in_docker(client, [job("forks", "fork_result.py")]), "forks.pre")
    assert run["status"] == "killed" and run["signal"] == 9, run


def test_control_without_the_pid_guard_the_child_reports_ok(client: Any, tmp_path: Path, monkeypatch) -> None:
    patched_probe(tmp_path, monkeypatch, "if written or os.getpid() != run_pid:", "if written:")
    assert eager(run_in_docker(client, [job("forks", "fork_result.py")]), "forks.pre")["status"] == "ok"


# ------------------------------------------------------------------ limits and leftovers


def test_a_script_fills_only_the_containers_own_file_systems(client: Any) -> None:
    batch = run_in_docker(client, [job("fill", "fill_disk.py", "100")], options=(("tmpfs", "48m"),))
    for place, outcome in said(batch, "fill.pre", "CASEKIT-FILL").items():
        written = int(outcome.split()[0])
        assert written <= 64 and "No space left on device" in outcome, (place, outcome)  # /dev/shm: Docker's 64m


def test_control_with_the_runs_in_out_the_working_folder_fills_the_host_disk(client: Any, monkeypatch) -> None:
    monkeypatch.setattr(DockerRunner, "run_isolation", lambda self: None)  # the old layout: runs below out/
    batch = run_in_docker(client, [job("fill", "fill_disk.py", "100")], options=(("tmpfs", "48m"),))
    assert said(batch, "fill.pre", "CASEKIT-FILL")["fill"] == "100 MiB"


DEEP = "3000"  # past Python's recursion limit


def test_folders_nested_past_the_stack_do_not_stop_the_probe(client: Any) -> None:
    batch = run_in_docker(client, [job("deep", "deep_folders.py", DEEP), job("victim", "victim.py")])
    assert said(batch, "deep.pre", "CASEKIT-DEEP") == int(DEEP)
    assert batch.failed == {} and intact(batch, "victim.pre")


def test_control_with_a_recursive_remover_the_probe_dies(client: Any, tmp_path: Path, monkeypatch) -> None:
    patched_probe(
        tmp_path,
        monkeypatch,
        "def remove_tree(path):\n",
        "def remove_tree(path):\n    return shutil.rmtree(path, True)\n",
    )
    batch = run_in_docker(client, [job("deep", "deep_folders.py", DEEP), job("victim", "victim.py")])
    assert "victim.pre" in batch.failed and "the probe stopped" in batch.failed["victim.pre"], batch.failed


# ------------------------------------------------------------------ who the script is, what it sees


def test_the_script_is_an_unprivileged_uid_and_sees_no_host_variable(
    client: Any,
    replay_image: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "casekit-test-aws-secret")
    closed = ("/casekit/work/request.json", "/casekit/work/out/env.json", "/casekit/work/jobs/who.pre/whoami.py")
    batch = run_in_docker(client, [job("who", "whoami.py", *closed)])
    report = said(batch, "who.pre", "CASEKIT-WHOAMI")
    assert report["uid"] >= RUN_UIDS and report["gid"] == report["uid"] and report["groups"] == []
    assert report["status_uid"] == [str(report["uid"])] * 4
    assert all(report[path].startswith("blocked: PermissionError") for path in closed), report
    image_names = {entry.split("=", 1)[0] for entry in replay_image.attrs["Config"]["Env"]}
    runner = DockerRunner(torch_spec(), client=client)
    # Docker's; the probe's network guard; torch's own cache folder (in the run's TMPDIR)
    probe_names = {"HOSTNAME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCHINDUCTOR_CACHE_DIR"}
    assert "AWS_SECRET_ACCESS_KEY" not in report["environment"]
    assert set(report["environment"]) <= set(runner._environment()) | image_names | probe_names


def test_control_a_host_variable_named_with_env_is_passed(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "casekit-test-aws-secret")
    monkeypatch.setenv("CASEKIT_TEST_PASSED", "yes")
    options = (("env", "CASEKIT_TEST_PASSED"), ("env", "CASEKIT_SET=1"))
    names = said(run_in_docker(client, [job("who", "whoami.py")], options=options), "who.pre", "CASEKIT-WHOAMI")
    assert {"CASEKIT_TEST_PASSED", "CASEKIT_SET"} <= set(names["environment"])
    assert "AWS_SECRET_ACCESS_KEY" not in names["environment"]
