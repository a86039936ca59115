"""Parallel runs in one warm probe (--jobs): same results as one at a time, runs that really overlap,
per-run cleanup that never touches a concurrent run, per-run timeouts, and the default number of runs."""

from __future__ import annotations

import os
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from casekit import probe
from casekit.archive.store import Archive
from casekit.replay.run import ReplayOptions, run_target
from casekit.runners.interface import ProbeJob, ProbeScheduling, TargetSpec
from casekit.runners.registry import make_runner
from casekit.runners.warm import WarmSession

from .security.procs import marked_processes, wait_marked, wait_unmarked

REPO_ROOT = Path(__file__).resolve().parent.parent
STARTER = REPO_ROOT / "cases"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def run_batch(jobs: list[ProbeJob], parallel: int) -> Any:
    """The jobs as one request to a probe already warm: all of them go to its pool of job workers.

    Not as a runner's run_probe sends them (the first request, given with the start): that request's eager
    runs are made one at a time while Dynamo warms up (EagerAhead, tested below), and on a loaded host the
    warm-up outlasts a run's timeout, so runs these tests need side by side would run one after the other."""
    runner = make_runner(
        TargetSpec(runner="python", options=(("env", "CASEKIT_TEST_TOKEN"),))
    )  # the test's marker reaches the scripts
    quiet = lambda message: None  # noqa: E731
    runner.prepare(quiet)
    with WarmSession(
        runner.python, None, runner.sandbox, scheduling=ProbeScheduling(parallel_runs=parallel)
    ) as session:
        session.start(quiet)
        return session.run_probe(jobs, quiet)


def interval(run: dict[str, Any]) -> tuple[float, float]:
    return run["started"], run["started"] + run["wall_s"]


# ------------------------------------------------------------ default N


@pytest.mark.parametrize(
    ("cpus", "sharing", "expected"),
    [(1, 1, 1), (2, 1, 2), (2, 2, 1), (2, 3, 1), (32, 3, 10), (16, 4, 4), (7, 2, 3)],
)
def test_default_runs_split_the_cores_among_the_targets(cpus: int, sharing: int, expected: int) -> None:
    assert probe.default_parallel_runs(cpus, sharing) == expected


def fake_cgroup(tmp_path: Path, self_line: str, files: dict[str, str]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text(self_line)
    return str(root), str(self_cgroup)


def test_cgroup_v2_quota_is_the_tightest_on_the_path(tmp_path: Path) -> None:
    # docker --cpus=1.5 writes "150000 100000" on the container's cgroup; a parent may be tighter or unlimited
    root, me = fake_cgroup(
        tmp_path,
        "0::/docker/abc\n",
        {"docker/abc/cpu.max": "150000 100000\n", "docker/cpu.max": "max 100000\n", "cpu.max": "max 100000\n"},
    )
    assert probe.cgroup_cpu_quota(root, me) == 1.5
    root, me = fake_cgroup(tmp_path / "b", "0::/a/b\n", {"a/b/cpu.max": "400000 100000", "a/cpu.max": "200000 100000"})
    assert probe.cgroup_cpu_quota(root, me) == 2.0


def test_cgroup_v1_quota_and_no_quota(tmp_path: Path) -> None:
    root, me = fake_cgroup(
        tmp_path,
        "4:cpu,cpuacct:/docker/x\n3:memory:/docker/x\n",
        {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "100000", "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000"},
    )
    assert probe.cgroup_cpu_quota(root, me) == 1.0
    root, me = fake_cgroup(tmp_path / "none", "0::/user.slice\n", {"user.slice/cpu.max": "max 100000"})
    assert probe.cgroup_cpu_quota(root, me) is None
    assert probe.cgroup_cpu_quota(str(tmp_path / "missing"), str(tmp_path / "missing-self")) is None


def test_request_decides_before_the_cores() -> None:
    assert probe.runs_at_once({"parallel_runs": 3}) == 3
    assert probe.runs_at_once({"parallel_runs": 3, "serial_timings": True}) == 1
    cores = probe.available_cpus()
    assert probe.runs_at_once({}) == probe.default_parallel_runs(cores, 1)
    assert probe.runs_at_once({"targets_sharing": 1000}) == 1
    assert probe.runs_at_once({"parallel_runs": True, "targets_sharing": "x"}) == cores  # junk: the default


def test_request_carries_the_scheduling(tmp_path: Path) -> None:
    import json

    from casekit.runners.batch import RequestPlaces, request_document

    job = ProbeJob(id="a", script=tmp_path / "a.py")
    places = RequestPlaces.one_folder(str(tmp_path))
    request = json.loads(json.dumps(request_document([job], places)))
    assert request["targets_sharing"] == 1 and "parallel_runs" not in request and "serial_timings" not in request
    scheduling = ProbeScheduling(parallel_runs=3, targets_sharing=2, serial_timings=True)
    request = request_document([job], places, scheduling=scheduling)
    assert (request["parallel_runs"], request["targets_sharing"], request["serial_timings"]) == (3, 2, True)
    # a runner made outside replay runs one at a time (capture keeps serial reference timings)
    assert make_runner(TargetSpec(runner="python")).scheduling.parallel_runs == 1


def test_replay_options_refuse_zero_jobs() -> None:
    from casekit.errors import CasekitError

    with pytest.raises(CasekitError, match="--jobs must be at least 1"):
        ReplayOptions(jobs=0)


def test_available_cpus_respects_affinity() -> None:
    assert 1 <= probe.available_cpus() <= len(os.sched_getaffinity(0))


def test_timing_load_mark_reaches_the_observation_and_the_report() -> None:
    from casekit.observe import interpret
    from casekit.report.text import observation_summary

    compiled = {
        "status": "ok",
        "calls": [{"entry": "f", "index": i, "args": [], "seconds": s} for i, s in enumerate((0.5, 0.1, 0.1))],
        "entries": {"f": {"name": "f", "file": "x.py", "line": 1}},
    }
    raw = {"runs": {"eager": {"status": "ok"}, "compiled": compiled}}
    for mark, expected in (("parallel:2", "parallel:2"), ("serial", None), (None, None)):
        observation = interpret({**raw, "timing_load": mark}, "x.py", "x.py")
        assert observation.timing_load == expected
        shown = "timings under parallel load (parallel:2)" in observation_summary("pre", observation)
        assert shown is (expected is not None)


# ------------------------------------------------------------ real torch


@pytest.mark.slow
def test_jobs_2_gives_the_same_results_as_jobs_1_on_starter_cases() -> None:
    cases = [c for c in Archive(STARTER).load_all() if c.id in {"tensor-if", "item-branch", "shape-recompiles"}]
    assert len(cases) == 3
    spec = TargetSpec(runner="python")
    quiet = lambda message: None  # noqa: E731
    summaries = []
    for jobs in (1, 2):
        run = run_target(spec, cases, ReplayOptions(record=False, verify_rollback=False, jobs=jobs), make_runner, quiet)
        assert run.error is None
        summaries.append(
            sorted(
                (
                    result.case_id,
                    str(result.verdict),
                    which,
                    script.status.value,
                    tuple(sorted((p.site_class.value, p.site.anchor.where(), p.site.category) for p in script.sites)),
                )
                for result in run.results
                for which, script in result.scripts.items()
            )
        )
    assert summaries[0] == summaries[1]
    assert len(summaries[0]) >= 3


@pytest.mark.slow
def test_runs_overlap_and_each_job_keeps_its_own_result(tmp_path: Path) -> None:
    jobs = [
        ProbeJob(
            id=f"sleepy{i}",
            script=write(
                tmp_path,
                f"sleepy{i}.py",
                f"""
                import time, torch
                @torch.compile(backend="eager")
                def f(x):
                    return x * {i}
                time.sleep(1.5)
                print("job {i}", f(torch.ones(2)).tolist())
                """,
            ),
            timeout=120,
        )
        for i in range(4)
    ]
    batch = run_batch(jobs, parallel=2)
    assert batch.failed == {}
    for i in range(4):
        raw = batch.results[f"sleepy{i}"]
        assert raw["timing_load"] == "parallel:2"
        assert raw["runs"]["compiled"]["status"] == "ok"
        assert f"job {i} [{float(i)}, {float(i)}]" in raw["runs"]["compiled"]["stdout_tail"]
    spans = [interval(run) for raw in batch.results.values() for run in raw["runs"].values()]
    overlapping = sum(1 for a in spans for b in spans if a < b and a[0] < b[1] and b[0] < a[1])
    assert overlapping >= 2, spans
    # runs of one job stay in order: the compiled run compares against the eager one
    for raw in batch.results.values():
        assert interval(raw["runs"]["eager"])[1] <= interval(raw["runs"]["compiled"])[0]


@pytest.mark.slow
def test_serial_batch_is_marked_and_does_not_overlap(tmp_path: Path) -> None:
    jobs = [
        ProbeJob(id=f"s{i}", script=write(tmp_path, f"s{i}.py", "import time\ntime.sleep(0.5)\n"), modes=("eager",))
        for i in range(3)
    ]
    batch = run_batch(jobs, parallel=1)
    assert {raw["timing_load"] for raw in batch.results.values()} == {"serial"}
    spans = sorted(interval(raw["runs"]["eager"]) for raw in batch.results.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{token}"])
    os._exit(0)
time.sleep(3)  # the other run, started beside it, is under way by then even on a loaded host
print("left a daemon behind")
"""

WATCHER = """
import time
time.sleep(10)
print("this run went on after the other run ended")
"""


@pytest.mark.slow
def test_a_double_fork_daemon_dies_with_its_run_not_with_a_concurrent_one(tmp_path: Path) -> None:
    token = uuid.uuid4().hex  # in the daemon's command line: found on the host
    daemon = write(tmp_path, "daemon.py", DAEMON.format(token=token))
    watcher = write(tmp_path, "watcher.py", WATCHER)
    jobs = [
        ProbeJob(id="watcher", script=watcher, modes=("eager",), timeout=120),
        ProbeJob(id="daemon", script=daemon, modes=("eager",), timeout=120),
    ]
    seen: list[float] = []  # when the host saw the daemon alive
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if marked_processes(token):
                seen.append(time.time())
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        batch = run_batch(jobs, parallel=2)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert batch.failed == {}
    assert batch.results["daemon"]["runs"]["eager"]["status"] == "ok"
    watched = batch.results["watcher"]["runs"]["eager"]
    assert watched["status"] == "ok" and "this run went on" in watched["stdout_tail"], watched.get("exception")
    daemon_end = interval(batch.results["daemon"]["runs"]["eager"])[1]
    assert interval(watched)[0] < daemon_end < interval(watched)[1]  # they really ran side by side
    assert seen, "the daemon was never seen on the host"
    assert max(seen) < interval(watched)[1] - 0.5  # it died with its own run, while the other still ran
    assert wait_unmarked(token) == []


@pytest.mark.slow
def test_a_hanging_run_times_out_while_another_finishes(tmp_path: Path) -> None:
    hangs = write(tmp_path, "hangs.py", "import time\nprint('hanging', flush=True)\ntime.sleep(600)\n")
    works = write(tmp_path, "works.py", "import time\ntime.sleep(2)\nprint('finished')\n")
    jobs = [
        ProbeJob(id="hangs", script=hangs, modes=("eager", "compiled"), timeout=6),
        ProbeJob(id="works", script=works, modes=("eager",), timeout=120),
    ]
    batch = run_batch(jobs, parallel=2)
    hung = batch.results["hangs"]["runs"]
    assert hung["eager"]["status"] == "timeout" and "compiled" not in hung  # a hang is not retried compiled
    done = batch.results["works"]["runs"]["eager"]
    assert done["status"] == "ok" and "finished" in done["stdout_tail"]
    # the hung run wrote nothing: its record is made when its timeout is declared. The other run, listed
    # after it, started meanwhile (one at a time it would only have started after the timeout). Its start, not
    # its end: on a loaded host (CI runs a second worker and the README's session beside) its 2 s sleep has
    # ended more than the 6 s after the hang began.
    assert interval(done)[0] < hung["eager"]["started"]
    assert batch.results["hangs"]["timing_load"] == batch.results["works"]["timing_load"] == "parallel:2"


@pytest.mark.slow
@pytest.mark.docker
def test_docker_default_follows_the_containers_cpu_limit(tmp_path: Path) -> None:
    from casekit.runners.docker import images
    from casekit.runners.docker.runner import DockerRunner

    from .docker_fixtures import docker_engine, torch_spec

    engine = docker_engine()
    images.ensure_image(torch_spec(), lambda line: None, engine)
    scripts = [write(tmp_path, f"c{i}.py", "import os\nprint(len(os.sched_getaffinity(0)))\n") for i in range(2)]
    jobs = [ProbeJob(id=f"c{i}", script=script, modes=("eager",), timeout=120) for i, script in enumerate(scripts)]
    marks = {}
    for cpus in ("1", "2"):
        runner = DockerRunner(torch_spec(options=(("cpus", cpus),)), client=engine)
        runner.scheduling = ProbeScheduling()  # the default replay gives: N from inside the container
        batch = runner.run_probe(jobs, lambda message: None)
        assert batch.failed == {}
        marks[cpus] = {raw["timing_load"] for raw in batch.results.values()}
    assert marks["1"] == {"serial"}  # --cpus=1: the cgroup quota leaves one core, one run at a time
    expected = "parallel:2" if (os.cpu_count() or 1) >= 2 else "serial"
    assert marks["2"] == {expected}


# ------------------------------------------------------------ eager runs while Dynamo loads


def run_batch_kept(jobs: list[ProbeJob], parallel: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any]]:
    """The batch and the probe's env.json record (the batch folder is kept, then removed here)."""
    import json
    import shutil

    monkeypatch.setenv("CASEKIT_KEEP_BATCH", "1")
    lines: list[str] = []
    runner = make_runner(TargetSpec(runner="python", options=(("env", "CASEKIT_TEST_TOKEN"),)))
    runner.scheduling = ProbeScheduling(parallel_runs=parallel)
    batch = runner.run_probe(jobs, lines.append)
    kept = Path(next(line for line in lines if line.startswith("session kept at ")).split()[3])
    try:
        return batch, json.loads((kept / "out" / "1" / "env.json").read_text())
    finally:
        shutil.rmtree(kept, ignore_errors=True)


ENTRY = """
import torch{extra}
@torch.compile(backend="eager")
def f(x):
    return (x * {i}).sin()
print("job {i}", f(torch.ones(3)).sum().item())
"""


@pytest.mark.slow
def test_eager_runs_made_while_dynamo_loads_give_the_results_of_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one script imports Dynamo itself: in the early worker it pays that import, and must still agree
    jobs = [
        ProbeJob(
            id=f"e{i}",
            script=write(tmp_path, f"e{i}.py", ENTRY.format(i=i, extra="\nimport torch._dynamo" if i == 1 else "")),
            timeout=120,
        )
        for i in range(8)
    ]
    serial, serial_record = run_batch_kept(jobs, 1, monkeypatch)
    parallel, parallel_record = run_batch_kept(jobs, 2, monkeypatch)
    assert serial_record["eager_runs_ahead"] == 0  # one at a time there is no idle core to use
    assert parallel_record["eager_runs_ahead"] >= 1, parallel_record
    assert serial.failed == parallel.failed == {}

    def seen(batch: Any) -> dict[str, Any]:
        return {
            job: {
                mode: (run["status"], run["stdout_tail"], [c["comparison"] for c in run["calls"]])
                for mode, run in raw["runs"].items()
            }
            for job, raw in batch.results.items()
        }

    assert seen(parallel) == seen(serial)
    for raw in parallel.results.values():  # the compiled run still compared against its own eager run
        calls = raw["runs"]["compiled"]["calls"]
        assert calls and all(call["comparison"]["allclose"] for call in calls), raw


@pytest.mark.slow
@pytest.mark.parametrize("trouble", ["kills its worker", "hangs"])
def test_trouble_in_an_early_eager_run_costs_only_its_own_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trouble: str
) -> None:
    bad = (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
        if trouble == "kills its worker"
        else "import time\ntime.sleep(600)\n"
    )
    token = uuid.uuid4().hex
    monkeypatch.setenv("CASEKIT_TEST_TOKEN", token)  # inherited by every process of the batch: found on the host after
    jobs = [ProbeJob(id="bad", script=write(tmp_path, "bad.py", bad), timeout=8)]
    jobs += [
        ProbeJob(id=f"ok{i}", script=write(tmp_path, f"ok{i}.py", ENTRY.format(i=i, extra="")), timeout=120)
        for i in range(3)
    ]
    batch, record = run_batch_kept(jobs, 2, monkeypatch)
    for i in range(3):
        runs = batch.results[f"ok{i}"]["runs"]
        assert runs["eager"]["status"] == runs["compiled"]["status"] == "ok", runs
        assert f"job {i}" in runs["compiled"]["stdout_tail"]
    if trouble == "hangs":  # made again in the pool, where its timeout is declared
        assert batch.results["bad"]["runs"]["eager"]["status"] == "timeout"
    else:  # its parent (the worker) is outside its PID namespace: getppid() is 0, and it kills only its own group
        assert batch.failed == {} and batch.results["bad"]["runs"]["eager"]["status"] == "killed"
    assert wait_unmarked(token, within=5) == []


# ------------------------------------------------------------ fast forks


def test_the_fast_fork_tunable_is_added_and_a_users_own_setting_wins() -> None:
    from casekit.runners.sandbox import FAST_FORK_TUNABLE, with_fast_fork

    assert with_fast_fork(None) == with_fast_fork("") == FAST_FORK_TUNABLE
    assert with_fast_fork("glibc.malloc.arena_max=2") == f"glibc.malloc.arena_max=2:{FAST_FORK_TUNABLE}"
    assert with_fast_fork("glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2") == (
        "glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2"
    )


HUGE_PAGES = """
import os
print("tunables", os.environ.get("GLIBC_TUNABLES"))
for line in open("/proc/self/smaps_rollup"):
    if line.startswith("AnonHugePages:"):
        print("anon huge kB", line.split()[1])
"""


@pytest.mark.slow
def test_runs_are_forked_from_a_heap_on_huge_pages(tmp_path: Path) -> None:
    """What makes a run's fork cheap: the probe's heap on transparent huge pages (where the host has them)."""
    job = ProbeJob(id="huge", script=write(tmp_path, "huge.py", HUGE_PAGES), modes=("eager",), timeout=120)
    run = run_batch([job], parallel=1).results["huge"]["runs"]["eager"]
    assert run["status"] == "ok"
    assert "tunables glibc.malloc.hugetlb=1" in run["stdout_tail"]
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists() and "[never]" not in thp.read_text():
        huge_kb = int(run["stdout_tail"].split("anon huge kB ")[1].split()[0])
        assert huge_kb > 10_000, run["stdout_tail"]  # torch's heap: ~100 MB of it here


# ------------------------------------------------------------ one warm probe: runs alone, then side by side


@pytest.mark.process
def test_a_warm_probe_runs_alone_and_side_by_side_after_a_worker_is_lost(tmp_path: Path) -> None:
    """A warm probe that ran a script alone owns a PID namespace for its runs, and its init; the workers it
    forks later live in that namespace. When a worker is lost (killed here from outside, as the OOM killer
    or a hung run would), its orphans are killed: the probe's init must not be, else the kernel ends every
    process of that namespace (the other workers) and every later run failed, the probe's own included."""
    import signal
    import sys

    from casekit.runners.interface import ScriptEntry
    from casekit.runners.sandbox import Sandbox
    from casekit.runners.warm import WarmSession

    token = f"casekit-lost-worker-{uuid.uuid4().hex}"

    def job(name: str, body: str) -> ProbeJob:
        return ProbeJob(id=name, script=write(tmp_path, f"{name}.py", body), modes=("eager",), timeout=120)

    quick = "print('ran')\n"
    held = (
        f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', '{token}'])\n"
    )

    def kill_its_worker() -> None:
        found = wait_marked(token)
        assert found, "the held run never started"
        status = Path(f"/proc/{found[0]}/status").read_text()
        worker = int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])
        os.kill(worker, signal.SIGKILL)

    with WarmSession(sys.executable, ScriptEntry.REDUCE, Sandbox.from_options(), {}, ProbeScheduling(2)) as session:
        assert session.run_probe([job("alone", quick)], lambda m: None).results["alone"]  # its namespace is made
        killer = threading.Thread(target=kill_its_worker)
        killer.start()
        lost = session.run_probe([job("held", held), job("beside", quick)], lambda m: None)
        killer.join()
        assert "held" not in lost.results and "beside" in lost.results, lost.failed
        for jobs in ([job("after", quick)], [job(f"again{i}", quick) for i in range(3)]):
            batch = session.run_probe(jobs, lambda message: None)
            for one in jobs:
                assert one.id in batch.results, (one.id, batch.failed.get(one.id))
                runs = batch.results[one.id]["runs"]
                assert isinstance(runs, dict) and runs["eager"]["status"] == "ok", batch.results[one.id]
    assert wait_unmarked(token) == []


@pytest.mark.process
def test_a_probe_that_dies_with_runs_side_by_side_blames_none_of_them_before_running_them_alone(
    tmp_path: Path,
) -> None:
    """The warm probe killed from outside (as the OOM killer would) while two scripts run side by side: it
    did not die in either, and which one it was running when it died is not known. Both run again, one at a
    time, in a new probe and come back; before, the first was said to be the script the probe died in and got
    no result."""
    import signal
    import sys

    from casekit.runners.interface import ScriptEntry
    from casekit.runners.sandbox import Sandbox
    from casekit.runners.warm import WarmSession

    def child_of(parent: int) -> int:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                status = (entry / "status").read_text()
                if f"\nPPid:\t{parent}\n" in status:
                    return int(entry.name)
        raise AssertionError(f"no child of {parent}")

    token = f"casekit-probe-dies-{uuid.uuid4().hex}"
    said: list[str] = []

    def job(name: str) -> ProbeJob:
        # a child that carries the token for 3 s, while the script waits for it (and then ends as any script)
        body = (
            f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import time; time.sleep(3)', '{token}'])\n"
        )
        return ProbeJob(id=name, script=write(tmp_path, f"{name}.py", body), modes=("eager",), timeout=120)

    with WarmSession(sys.executable, ScriptEntry.REDUCE, Sandbox.from_options(), {}, ProbeScheduling(2)) as session:

        def kill_the_probe_when_both_run() -> None:
            deadline = time.monotonic() + 120
            while len(marked_processes(token)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert session.process is not None  # bwrap; the probe is its child, in a process group of its own
            os.kill(child_of(session.process.pid), signal.SIGKILL)

        # a first request: its eager runs go ahead one by one while torch imports; the next ones are scheduled
        quick = ProbeJob(
            id="quick", script=write(tmp_path, "quick.py", "print('ran')\n"), modes=("eager",), timeout=120
        )
        assert "quick" in session.run_probe([quick], lambda message: None).results
        killer = threading.Thread(target=kill_the_probe_when_both_run)
        killer.start()
        batch = session.run_probe([job("first"), job("second")], said.append)
        killer.join()
        assert set(batch.results) == {"first", "second"} and batch.failed == {}, batch.failed
        for name in ("first", "second"):
            runs = batch.results[name]["runs"]
            assert isinstance(runs, dict) and runs["eager"]["status"] == "ok", batch.results[name]
        assert any("running them again one at a time" in line for line in said), said
    assert wait_unmarked(token) == []


@pytest.mark.process
def test_killing_a_lost_workers_orphans_spares_the_probes_own_runs_init() -> None:
    """kill_strays (after a worker is lost) kills the probe's children that are not workers; the init of the
    PID namespace the probe forks its runs into is one of its children and must live on: a process makes one
    such namespace, and with its init gone every later run of the probe failed, and the probe with it."""
    import subprocess
    import sys

    check = (
        "from casekit import probe\n"
        "probe.enter_probe_user_namespace()\n"
        "init = probe.run_namespace()\n"
        "probe.kill_strays(set())\n"
        "print('same init' if probe.run_namespace() == init else 'another init', flush=True)\n"
        "import os, signal\n"
        "os.kill(init, signal.SIGKILL)  # it holds this process's pipes: the test would wait on it\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "same init", done.stderr[-2000:]
