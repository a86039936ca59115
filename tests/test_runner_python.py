"""The python runner and its session (the probe as a local process), with real interpreters and real torch.

One probe batch (one torch import) serves the graph-break and per-job timeout
checks; the overall-timeout and Ctrl-C checks start probes of their own.
"""

from __future__ import annotations

import _thread
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from casekit import settings
from casekit.errors import EnvironmentFailed, RunnerError
from casekit.runners import process, warm
from casekit.runners.interface import ProbeBatchResult, ProbeJob, TargetSpec
from casekit.runners.process import overall_timeout
from casekit.runners.python import PythonRunner
from casekit.runners.sandbox import Sandbox
from casekit.runners.warm import WarmSession
from tests.security.procs import marked_processes, wait_unmarked

pytestmark = pytest.mark.slow

ITEM_BREAK = """\
import torch

@torch.compile
def scale_by_total(x):
    total = x.sum().item()  # graph break: Tensor.item
    return x * total

print(scale_by_total(torch.ones(3)))
"""

HANGS = """\
import time
time.sleep(600)
"""

# Writes its pid where argv[1] says, then hangs: the test can check it was killed.
HANGS_WITH_PIDFILE = """\
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent that is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def probe_pid(lines: list[str]) -> int:
    started = next(line for line in lines if line.startswith("probe started"))
    return int(started.split("(pid ", 1)[1].split(")", 1)[0])


def run_one_batch(python: str, jobs: list[ProbeJob], progress, sandbox: Sandbox | None = None) -> ProbeBatchResult:
    """One batch in a session of its own, as a runner's run_probe runs it."""
    with WarmSession(python, None, sandbox or Sandbox.from_options()) as session:
        return session.run_probe(jobs, progress)


@pytest.fixture
def batch_dirs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folders a session makes (its own, the launcher's stage), to check they are cleaned up."""
    made: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: str, **kwargs: str) -> str:
        path = real_mkdtemp(*args, **kwargs)
        made.append(Path(path))
        return path

    monkeypatch.setattr(warm.tempfile, "mkdtemp", recording_mkdtemp)
    monkeypatch.delenv(settings.KEEP_BATCH_ENV, raising=False)
    return made


@pytest.fixture(scope="module")
def current(tmp_path_factory: pytest.TempPathFactory) -> tuple[PythonRunner, ProbeBatchResult, list[str]]:
    """The current interpreter over a graph-break script and a script that hangs (2 s limit)."""
    folder = tmp_path_factory.mktemp("scripts")
    jobs = [
        ProbeJob("item-break:pre", write(folder / "item_break.py", ITEM_BREAK)),
        ProbeJob("hang:pre", write(folder / "hangs.py", HANGS), modes=("eager",), timeout=2.0),
    ]
    lines: list[str] = []
    runner = PythonRunner(TargetSpec("python"))
    result = runner.run_probe(jobs, lines.append)
    return runner, result, lines


def test_current_interpreter_observes_the_graph_break(
    current: tuple[PythonRunner, ProbeBatchResult, list[str]],
) -> None:
    runner, result, _ = current
    assert result.failed == {}
    compiled = result.results["item-break:pre"]["runs"]["compiled"]  # type: ignore[index]
    assert compiled["status"] == "ok"
    assert any(record["kind"] == "graph_breaks" for record in compiled["records"])
    assert len(compiled["graphs"]) == 2  # the break splits the function in two
    assert result.environment["torch"] == runner.torch_version
    assert result.environment["python_executable"] == sys.executable
    assert result.import_s is not None and result.import_s > 0


def test_prepare_tells_the_versions(current: tuple[PythonRunner, ProbeBatchResult, list[str]]) -> None:
    runner, _, _ = current
    facts = runner.describe()
    assert facts["runner"] == "python"
    assert facts["python_executable"] == sys.executable
    assert facts["torch"] == runner.torch_version and runner.torch_version
    assert facts["python"] == sys.version.split()[0]


def test_progress_reports_each_finished_job(current: tuple[PythonRunner, ProbeBatchResult, list[str]]) -> None:
    _, _, lines = current
    assert any(line.startswith("torch ") and " imported in " in line for line in lines)
    assert "1/2 item-break:pre done (eager ok, compiled ok)" in lines
    assert "2/2 hang:pre done (eager timeout)" in lines


def test_hanging_script_is_stopped_by_its_job_timeout(
    current: tuple[PythonRunner, ProbeBatchResult, list[str]],
) -> None:
    _, result, _ = current
    eager = result.results["hang:pre"]["runs"]["eager"]  # type: ignore[index]
    assert eager["status"] == "timeout"
    assert eager["timeout_s"] == 2.0


def test_missing_interpreter_is_one_clear_error() -> None:
    runner = PythonRunner(TargetSpec("python", python="/nonexistent/bin/python"))
    with pytest.raises(RunnerError, match=r"^python /nonexistent/bin/python: no such interpreter$"):
        runner.prepare(lambda _line: None)
    with pytest.raises(EnvironmentFailed, match="no such interpreter"):  # bisection steps around it
        run_one_batch("/nonexistent/bin/python", [], lambda _line: None)


def test_interpreter_without_torch_is_one_clear_error(tmp_path: Path, batch_dirs: list[Path]) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    pattern = (
        rf"^python {bare}: torch is not importable: ModuleNotFoundError: No module named 'torch'; "
        r"install torch into it, or name another interpreter with --python PATH$"
    )
    with pytest.raises(RunnerError, match=pattern):
        PythonRunner(TargetSpec("python", python=bare)).prepare(lambda _line: None)
    script = write(tmp_path / "item_break.py", ITEM_BREAK)
    with pytest.raises(EnvironmentFailed, match=pattern):
        run_one_batch(bare, [ProbeJob("item-break:pre", script)], lambda _line: None)
    assert batch_dirs and not any(path.exists() for path in batch_dirs)


def test_casekits_own_interpreter_without_torch_names_python_and_with_torch() -> None:
    """A `uv tool` or pipx install holds no torch: the remedy is another interpreter or torch beside casekit."""
    line = process.torch_missing(sys.executable, "ModuleNotFoundError: No module named 'torch'")
    assert line.endswith(
        "name an interpreter that has torch with --python PATH, or install torch beside casekit "
        "(uv tool install --with torch ..., pipx inject casekit torch)"
    )
    assert "--python" not in process.torch_missing("/opt/other/bin/python", "x").split("; ")[0]


def test_overall_timeout_is_every_run_plus_the_import() -> None:
    jobs = [ProbeJob("a", Path("a.py"), timeout=10), ProbeJob("b", Path("b.py"), modes=("eager",), timeout=5)]
    assert overall_timeout(jobs) == 10 * 2 + 5 + process.IMPORT_MARGIN_S


def test_overall_timeout_kills_the_probe_and_reports_unfinished_jobs(
    tmp_path: Path, batch_dirs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write(tmp_path / "item_break.py", ITEM_BREAK)
    lines: list[str] = []
    monkeypatch.setattr(warm, "overall_timeout", lambda jobs: 1.0)  # shorter than the import: the limit ends it
    result = run_one_batch(sys.executable, [ProbeJob("item-break:pre", script)], lines.append)
    assert result.results == {}
    assert result.failed == {"item-break:pre": "the probe was stopped after its overall limit of 1 s"}
    assert "probe exceeded its overall limit of 1 s; stopping it" in lines
    assert wait_dead(probe_pid(lines))
    assert not any(path.exists() for path in batch_dirs)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_kills_the_probe_and_the_running_script(
    tmp_path: Path, batch_dirs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"casekit-ctrl-c-{uuid.uuid4().hex}"
    monkeypatch.setenv("CASEKIT_TEST_TOKEN", token)  # the sandboxed script is found on the host by it
    script = write(tmp_path / "hangs.py", "import time\ntime.sleep(600)\n")
    job = ProbeJob("hang:pre", script, modes=("eager",), timeout=600)

    def interrupt_once_the_script_runs() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            b"hangs.py" in Path(f"/proc/{pid}/cmdline").read_bytes() or _is_script_run(pid)
            for pid in marked_processes(token)
        ):
            time.sleep(0.1)
        _thread.interrupt_main()  # what Ctrl-C does to the main thread

    threading.Thread(target=interrupt_once_the_script_runs, daemon=True).start()
    lines: list[str] = []
    sandbox = Sandbox.from_options((("env", "CASEKIT_TEST_TOKEN"),))  # the marker reaches the script
    with pytest.raises(KeyboardInterrupt):
        run_one_batch(sys.executable, [job], lines.append, sandbox=sandbox)
    # the script runs in a session of its own, apart from the probe: both must be gone
    assert wait_unmarked(token) == []
    assert wait_dead(probe_pid(lines))
    assert not any(path.exists() for path in batch_dirs)


def _is_script_run(pid: int) -> bool:
    """A forked run of the probe: the probe's children (the script runs in one of them)."""
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return b"probe.py" in Path(f"/proc/{parent}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return False


def test_keep_batch_leaves_the_folder_for_inspection(
    tmp_path: Path, batch_dirs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.KEEP_BATCH_ENV, "1")
    script = write(tmp_path / "item_break.py", ITEM_BREAK)
    lines: list[str] = []
    run_one_batch(sys.executable, [ProbeJob("item-break:pre", script, modes=("eager",))], lines.append)
    assert batch_dirs and (batch_dirs[0] / "in" / "requests" / "1" / "request.json").exists()
    assert (batch_dirs[0] / "out" / "1" / "item-break:pre.result.json").exists()
    assert f"session kept at {batch_dirs[0]} ({settings.KEEP_BATCH_ENV}=1)" in lines
    shutil.rmtree(batch_dirs[0])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_the_process_walk_finds_live_descendants_and_skips_zombies() -> None:
    """kill_process_tree signals what `live_processes` lists: a dead child not yet reaped is no target."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"],
        start_new_session=True,  # as the probe is started: the leader of its own group
    )
    zombie = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while not process._descendants(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.05)  # exited, and nobody has waited for it: a zombie of this process
        table = process.live_processes()
        assert table[parent.pid] == os.getpid()
        assert zombie.pid not in table
        (grandchild,) = process._descendants(parent.pid)
        assert table[grandchild] == parent.pid
    finally:
        process.kill_process_tree(parent)
        zombie.wait()
    deadline = time.monotonic() + 10
    while grandchild in process.live_processes() and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGKILL was sent; dead (or a zombie of whoever adopted it) in a moment
    assert grandchild not in process.live_processes()


def test_the_torch_import_is_a_phase_a_terminal_times(
    current: tuple[PythonRunner, ProbeBatchResult, list[str]],
) -> None:
    """The import and warm-up (36-103 s on a loaded machine) open a phase: nothing is silent while it runs."""
    _, _, lines = current
    opened = next(i for i, line in enumerate(lines) if "importing torch" in line)
    closed = next(i for i, line in enumerate(lines) if " imported in " in line)
    assert opened < closed and lines[opened].endswith("…") and "warming Dynamo up" in lines[opened]


def test_an_interpreter_whose_torch_lacks_bytecode_is_told_once_with_the_remedy(tmp_path: Path) -> None:
    """A real venv whose torch (a stand-in package: the check reads files, it imports nothing) has no
    .pyc: the note names the folder and the compileall that fixes it; once compiled, nothing is said."""
    from casekit.runners.python import bytecode_note, torch_without_bytecode

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("__version__ = '2.13.0'\n")
    assert torch_without_bytecode(python) == str(site)
    note = bytecode_note(python)
    assert note is not None and f"compile it once: {python} -m compileall -q -j 0 {site}" in note
    assert bytecode_note(python) is None, "told once"
    subprocess.run([python, "-m", "compileall", "-q", str(site)], check=True)
    assert torch_without_bytecode(python) is None
    assert torch_without_bytecode(sys.executable) is None, "this interpreter's torch has its bytecode"
