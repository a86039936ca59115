"""The docker runner against a real engine: a real replay, and a sandbox that holds.

Needs a Docker engine and the base image (.ci/docker-setup.sh makes both);
the torch 2.13.0 replay image is built once and reused. Hostile scripts never
send traffic anywhere: the network probe is a UDP connect (which only asks the
kernel for a route), and the fork bomb is bounded by its own loop.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from casekit.errors import DockerUnavailable, RunnerError
from casekit.runners.docker import images
from casekit.runners.docker.runner import PROBE_CAPABILITIES, RUN_LABEL, RUN_UIDS, RUNS_IN_CONTAINER, DockerRunner
from casekit.runners.interface import ProbeJob, TargetSpec

pytestmark = pytest.mark.docker

REPO_ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = os.environ.get("CASEKIT_TEST_BASE_IMAGE", "casekit-base:bookworm")
WHEELHOUSE = os.environ.get("CASEKIT_WHEELHOUSE", "/opt/wheels")


def docker_engine() -> Any:
    """The engine, started with .ci/docker-setup.sh when needed; skip (or fail under CI) without one."""
    try:
        return images.connect()
    except DockerUnavailable as error:
        reason = str(error)
    if not os.environ.get("DOCKER_HOST"):
        setup = subprocess.run([str(REPO_ROOT / ".ci" / "docker-setup.sh")], capture_output=True, text=True)
        if setup.returncode == 0:
            return images.connect()
        reason = (setup.stderr.strip().splitlines() or [reason])[-1]
    if os.environ.get("CASEKIT_REQUIRE_DOCKER"):
        pytest.fail(f"no Docker engine: {reason}")
    pytest.skip(f"no Docker engine: {reason}")


def torch_spec(**changes: Any) -> TargetSpec:
    given = changes.pop("options", ())
    options = list(given.items()) if isinstance(given, dict) else list(given)  # a key may come twice (env)
    return TargetSpec(
        runner="docker",
        torch="2.13.0",
        # The local CPU wheel when there is one, else PyTorch's CPU index (not PyPI's 2.5 GB CUDA build).
        find_links=WHEELHOUSE if Path(WHEELHOUSE).is_dir() else None,
        cuda=None if Path(WHEELHOUSE).is_dir() else "cpu",
        options=(("base_image", BASE_IMAGE), *options),
        **changes,
    )


@pytest.fixture(scope="module")
def engine() -> Any:
    client = docker_engine()
    if not os.environ.get("DOCKER_HOST"):
        subprocess.run([str(REPO_ROOT / ".ci" / "docker-setup.sh")], check=True, capture_output=True)
    return client


@pytest.fixture(scope="module")
def replay_image(engine: Any) -> Any:
    """The torch 2.13.0 image, built on first use (about 90 s) and reused after."""
    return images.ensure_image(torch_spec(), lambda line: None, engine)


def write_script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def containers_of_run(engine: Any, run_id: str | None) -> list[Any]:
    assert run_id
    return engine.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})


class ContainerWatcher:
    """Records the probe container's inspect data while it runs (it is removed afterwards)."""

    def __init__(self, engine: Any, runner: Any = None) -> None:
        self.engine = engine
        self.runner = runner  # only this runner's container (other casekit runs may share the engine)
        self.attrs: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ContainerWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.is_set() and self.attrs is None:
            run_id = getattr(self.runner, "last_run_id", None)
            for container in self.engine.containers.list(filters={"label": "casekit.role=probe"}):
                if self.runner is None or (run_id and container.labels.get(RUN_LABEL) == run_id):
                    self.attrs = container.attrs
            time.sleep(0.2)


GRAPH_BREAK = """\
import torch

def f(x):
    y = x * 2
    if y.sum().item() > 0:
        return y + 1
    return y - 1

print(torch.compile(f)(torch.ones(4)))
"""


def test_replays_a_graph_break_in_one_sandboxed_container(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path, "gb.py", GRAPH_BREAK)
    runner = DockerRunner(torch_spec(), client=engine)
    progress: list[str] = []
    runner.prepare(progress.append)
    assert any("reusing" in line for line in progress)  # built once by the fixture, reused here

    started = time.monotonic()
    result = runner.run_probe([ProbeJob(id="gb", script=script)], progress.append)
    print(f"one batch in docker: {time.monotonic() - started:.1f} s (torch import {result.import_s:.1f} s)")

    assert result.failed == {}
    assert str(result.environment.get("torch", "")).startswith("2.13.0") or "2.13.0" in str(result.environment)
    runs = result.results["gb"]["runs"]
    assert runs["eager"]["status"] == "ok"
    assert runs["compiled"]["status"] == "ok"
    breaks = [record for record in runs["compiled"]["records"] if record["kind"] == "graph_breaks"]
    assert breaks and "gb.py:5" in breaks[0]["message"]
    assert "Tensor.item()" in breaks[0]["message"]
    assert containers_of_run(engine, runner.last_run_id) == []

    facts = runner.describe()
    assert facts["image_id"] == replay_image.id
    assert facts["image_tags"] == replay_image.tags
    assert "network=none" in str(facts["sandbox"])


NETWORK = """\
import errno, os, socket
print("interfaces:", ",".join(sorted(os.listdir("/sys/class/net"))))
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    probe.connect(("192.0.2.1", 9))  # UDP connect sends nothing: it only asks for a route
    print("route: yes")
except OSError as error:
    print("route: refused", errno.errorcode.get(error.errno))
"""

WRITES = """\
import errno, os
print("uid:", os.getuid(), os.getgid())
print([line for line in open("/proc/self/status") if line.startswith("CapEff")][0].strip())
print([line for line in open("/proc/self/status") if line.startswith("CapPrm")][0].strip())
for path in ["/etc/casekit-escape", "/usr/lib/casekit-escape", "/opt/casekit-venv/casekit-escape",
             "/casekit/work/scripts/casekit-escape", "/casekit/work/probe.py", "/casekit/work/request.json",
             __file__]:
    try:
        with open(path, "a") as handle:
            handle.write("escaped")
        print("WROTE", path)
    except OSError as error:
        print("refused", path, errno.errorcode.get(error.errno))
with open("/tmp/{token}", "w") as handle:
    handle.write("inside")
print("tmp: ok")
"""

SLEEPER = """\
import time
time.sleep(10**6)
"""

FORK_BOMB = """\
import errno, os, time
children = 0
for _ in range(2000):  # bounded even if the pids limit were not there
    try:
        pid = os.fork()
    except OSError as error:
        print("fork refused after", children, "children:", errno.errorcode.get(error.errno))
        break
    if pid == 0:
        while True:
            time.sleep(60)
    children += 1
else:
    print("fork never refused:", children)
"""


def test_sandbox_stops_hostile_scripts_and_leaves_nothing(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    token = f"casekit-escape-{uuid.uuid4().hex}"
    scripts = {
        "network": write_script(tmp_path, "network.py", NETWORK),
        "writes": write_script(tmp_path, "writes.py", WRITES.replace("{token}", token)),
        "sleeper": write_script(tmp_path, "sleeper.py", SLEEPER),
        "bomb": write_script(tmp_path, "bomb.py", FORK_BOMB),  # last: it exhausts the pids limit
    }
    digests = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in scripts.items()}
    jobs = [
        ProbeJob(id="network", script=scripts["network"], modes=("eager",), allow_network=True),
        ProbeJob(id="writes", script=scripts["writes"], modes=("eager",)),
        ProbeJob(id="sleeper", script=scripts["sleeper"], modes=("eager",), timeout=3),
        ProbeJob(id="bomb", script=scripts["bomb"], modes=("eager",), timeout=60),
    ]
    runner = DockerRunner(torch_spec(), client=engine)
    with ContainerWatcher(engine, runner) as watcher:
        result = runner.run_probe(jobs, lambda line: None)
    assert result.failed == {}
    out = {job_id: result.results[job_id]["runs"]["eager"] for job_id in result.results}

    # (a) no network: only loopback exists, no route out, and the engine says so
    assert "interfaces: lo\n" in out["network"]["stdout_tail"]
    assert "route: refused ENETUNREACH" in out["network"]["stdout_tail"]
    assert watcher.attrs is not None
    host_config = watcher.attrs["HostConfig"]
    assert host_config["NetworkMode"] == "none"
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["CapDrop"] == ["ALL"]
    assert {name.removeprefix("CAP_") for name in host_config["CapAdd"]} == set(PROBE_CAPABILITIES)
    assert host_config["SecurityOpt"] == ["no-new-privileges"]
    assert host_config["PidsLimit"] == 512
    assert host_config["Memory"] == 4 * 1024**3
    assert set(host_config["Tmpfs"]) == {"/tmp", RUNS_IN_CONTAINER}
    assert watcher.attrs["Config"]["User"] == "0:0"  # the probe; the scripts are not root (b)
    mounts = {mount["Destination"]: mount["RW"] for mount in watcher.attrs["Mounts"]}
    assert mounts == {"/casekit/work": False, "/casekit/work/out": True}

    # (b) no writes outside the tmpfs; an unprivileged uid of its own, no capabilities
    writes = out["writes"]["stdout_tail"]
    uid, gid = (int(n) for n in writes.split("uid: ", 1)[1].split()[:2])
    assert uid >= RUN_UIDS and gid == uid
    assert "CapEff:\t0000000000000000" in writes and "CapPrm:\t0000000000000000" in writes
    assert "WROTE" not in writes
    assert writes.count("refused") == 7
    assert "tmp: ok" in writes
    assert not Path("/tmp", token).exists()  # the container's /tmp is its own

    # (c) the fork bomb hits the pids limit, (d) the sleeper is killed by its timeout
    assert "fork refused after" in out["bomb"]["stdout_tail"]
    assert int(out["bomb"]["stdout_tail"].split("after")[1].split()[0]) < 512
    assert out["sleeper"]["status"] == "timeout"

    assert containers_of_run(engine, runner.last_run_id) == []
    assert {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in scripts.items()} == digests


def test_wall_clock_limit_kills_and_removes_the_container(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path, "sleeper.py", SLEEPER)
    runner = DockerRunner(torch_spec(options={"timeout": "10"}), client=engine)
    started = time.monotonic()
    result = runner.run_probe([ProbeJob(id="sleeper", script=script, timeout=600)], lambda line: None)
    assert time.monotonic() - started < 60
    assert "wall-clock limit" in result.failed["sleeper"]
    assert containers_of_run(engine, runner.last_run_id) == []


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_removes_the_container(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path, "sleeper.py", SLEEPER)
    runner = DockerRunner(torch_spec(), client=engine)
    main_thread = threading.main_thread().ident
    assert main_thread is not None

    def press_ctrl_c_once_running() -> None:
        with ContainerWatcher(engine, runner) as watcher:
            while watcher.attrs is None:
                time.sleep(0.1)
        signal.pthread_kill(main_thread, signal.SIGINT)

    pressing = threading.Thread(target=press_ctrl_c_once_running, daemon=True)
    pressing.start()
    with pytest.raises(KeyboardInterrupt):
        runner.run_probe([ProbeJob(id="sleeper", script=script, timeout=600)], lambda line: None)
    pressing.join(timeout=10)
    assert containers_of_run(engine, runner.last_run_id) == []


def test_gpu_request_without_gpu_runtime_is_one_clear_error(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    if "nvidia" in (engine.info().get("Runtimes") or {}):
        pytest.skip("this engine has a GPU runtime")
    script = write_script(tmp_path, "gb.py", GRAPH_BREAK)
    runner = DockerRunner(
        TargetSpec(runner="docker", image=replay_image.tags[0], options=(("gpus", "all"),)), client=engine
    )
    with pytest.raises(RunnerError) as raised:
        runner.run_probe([ProbeJob(id="gb", script=script)], lambda line: None)
    message = str(raised.value)
    assert "\n" not in message
    assert "no GPU runtime" in message and "gpus=none" in message
    assert containers_of_run(engine, runner.last_run_id) == []


def test_relaxations_are_explicit_options(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path, "network.py", NETWORK)
    runner = DockerRunner(
        torch_spec(options={"network": "bridge", "read_only": "false", "memory": "6g", "pids": "1024"}),
        client=engine,
    )
    with ContainerWatcher(engine, runner) as watcher:
        result = runner.run_probe(
            [ProbeJob(id="network", script=script, modes=("eager",), allow_network=True)], lambda line: None
        )
    assert watcher.attrs is not None
    host_config = watcher.attrs["HostConfig"]
    assert host_config["NetworkMode"] == "bridge"
    assert host_config["ReadonlyRootfs"] is False
    assert host_config["Memory"] == 6 * 1024**3
    assert host_config["PidsLimit"] == 1024
    assert "eth0" in result.results["network"]["runs"]["eager"]["stdout_tail"]


def test_docker_replay_classifies_like_the_venv_runner(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    """Real starter cases, one container for the whole archive, the same verdicts as a managed venv."""
    from casekit.archive.store import Archive
    from casekit.replay.run import ReplayOptions, replay
    from casekit.runners.registry import make_runner

    archive = Archive(REPO_ROOT / "cases")
    cases = archive.load_all(["item-branch", "tensor-if", "print-in-forward", "shape-recompiles"])
    venv = TargetSpec(runner="venv", torch="2.13.0", find_links=WHEELHOUSE if Path(WHEELHOUSE).is_dir() else None)
    runs: list[Any] = []

    def factory(spec: TargetSpec) -> Any:
        runner = make_runner(spec)
        runs.append(runner)
        return runner

    report = replay(cases, [torch_spec(), venv], ReplayOptions(record=False, parallel=1), None, factory, lambda m: None)
    by_target = {run.spec.runner: run for run in report.targets}
    assert not by_target["docker"].error and not by_target["venv"].error
    summary = {
        kind: [
            (r.case_id, r.verdict, sorted(p.site_class.value for s in r.scripts.values() for p in s.sites))
            for r in run.results
        ]
        for kind, run in by_target.items()
    }
    assert summary["docker"] == summary["venv"]
    assert {verdict for _, verdict, _ in summary["docker"]} == {"unchanged"}
    docker_runner = next(r for r in runs if r.name == "docker")
    assert len(containers_of_run(engine, docker_runner.last_run_id)) == 0  # one container, removed
    assert by_target["docker"].environment["torch"].startswith("2.13.0")


def test_copy_transfer_for_remote_engines_runs_the_same_batch(engine: Any, replay_image: Any, tmp_path: Path) -> None:
    """A remote engine (DOCKER_HOST=ssh://, tcp://) cannot see local folders: the batch goes in and
    the results come out through the engine's API, in a volume that is removed afterwards."""
    script = write_script(tmp_path, "gb.py", GRAPH_BREAK)
    writes = write_script(tmp_path, "writes.py", "open('/casekit/work/probe.py', 'a').write('x')\n")
    runner = DockerRunner(torch_spec(options=(("transfer", "copy"),)), client=engine)
    result = runner.run_probe([ProbeJob(id="gb", script=script), ProbeJob(id="writes", script=writes)], lambda m: None)
    assert result.failed == {}
    breaks = [r for r in result.results["gb"]["runs"]["compiled"]["records"] if r["kind"] == "graph_breaks"]
    assert breaks and "gb.py:5" in breaks[0]["message"]
    # the copied scripts are root-owned: the sandbox user still cannot change them
    assert result.results["writes"]["runs"]["eager"]["exception"]["type"] == "PermissionError"
    assert containers_of_run(engine, runner.last_run_id) == []
    assert engine.volumes.list(filters={"label": f"{RUN_LABEL}={runner.last_run_id}"}) == []


def test_transfer_defaults_follow_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from casekit.runners.docker.runner import default_transfer

    monkeypatch.setenv("DOCKER_HOST", "ssh://gpu-box")
    assert default_transfer() == "copy"
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert default_transfer() == "bind"
    monkeypatch.delenv("DOCKER_HOST")
    assert default_transfer() == "bind"
