"""Signals to casekit mid-run, for real: nothing it started survives, no folder is left, bundles stay whole.

CASEKIT_SIGNAL_TRIALS sets the number of random trials (default 10 here; the note reports a run of 30).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bundle import load_case
from casekit.runners.process import sweep_stale_batches

from ..conftest import ROOT, as_from_a_terminal
from .conftest import requires_sandbox
from .procs import marked_processes, wait_unmarked

TRIALS = int(os.environ.get("CASEKIT_SIGNAL_TRIALS", "10"))
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
STARTERS = ["item-branch", "tensor-if"]
CAPTURED = "starter/item-branch/repro.py"
SECOND_PYTHON = str(Path(sys.executable).with_name(f"python{sys.version_info.major}.{sys.version_info.minor}"))

pytestmark = requires_sandbox


def start_casekit(
    archive: Path, tmpdir: Path, token: str, command: str, signals_at_start: Callable[[], None] = as_from_a_terminal
) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir), "CASEKIT_TEST_TOKEN": token, "PYTHONPATH": str(ROOT)}
    marker = ["--allow", "env=CASEKIT_TEST_TOKEN"]  # the scripts carry it: the host finds their processes
    if command == "capture":
        args = ["capture", str(ROOT / "examples" / CAPTURED), "--id", "captured", "--archive", str(archive), *marker]
    else:  # two targets side by side (two threads): a signal must stop both, not wait for them
        args = ["replay", "--archive", str(archive), "--python", sys.executable, "--python", SECOND_PYTHON, *marker]
    return subprocess.Popen(
        [sys.executable, "-m", "casekit", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=signals_at_start,
    )


def as_under_nohup() -> None:
    as_from_a_terminal()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.process
def test_a_hang_up_ignored_at_start_stays_ignored(tmp_path: Path) -> None:
    """`nohup casekit replay ... &`: the terminal closing does not stop the replay; it finishes whole."""
    archive, tmpdir = tmp_path / "cases", tmp_path / "tmp"
    archive.mkdir()
    tmpdir.mkdir()
    shutil.copy(ROOT / "cases" / "item-branch.toml", archive)
    token = f"casekit-nohup-{uuid.uuid4().hex}"
    process = start_casekit(archive, tmpdir, token, "replay", signals_at_start=as_under_nohup)
    deadline = time.monotonic() + 120
    while not any(b"probe.py" in _cmdline(pid) for pid in marked_processes(token)):  # a probe runs
        assert process.poll() is None and time.monotonic() < deadline, "no probe started"
        time.sleep(0.05)
    process.send_signal(signal.SIGHUP)
    stdout, stderr = process.communicate(timeout=300)
    assert "stopped by" not in stderr
    assert process.returncode in (0, 1), stderr  # the verdicts' exit status: the replay ran to its end
    assert "item-branch" in stdout  # its verdict line
    assert list(tmpdir.iterdir()) == []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def bundles_whole(archive: Path, originals: dict[str, str]) -> None:
    """Each bundle is its original, or its original plus complete replay records."""
    for case_id, text in originals.items():
        now = (archive / f"{case_id}.toml").read_text()
        if now == text:
            continue
        before, after = load_case(ROOT / "cases" / f"{case_id}.toml"), Archive(archive).load(case_id)
        assert after.replays[: len(before.replays)] == before.replays
        assert len(after.replays) > len(before.replays)


@pytest.mark.slow
def test_random_signals_during_replay_leave_nothing_behind(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CASEKIT_SIGNAL_SEED", "9")))
    outcomes = []
    for trial in range(TRIALS):
        archive = tmp_path / f"t{trial}" / "cases"
        tmpdir = tmp_path / f"t{trial}" / "tmp"
        archive.mkdir(parents=True)
        tmpdir.mkdir()
        originals = {}
        for case_id in STARTERS:
            shutil.copy(ROOT / "cases" / f"{case_id}.toml", archive)
            originals[case_id] = (archive / f"{case_id}.toml").read_text()
        token = f"casekit-signal-{uuid.uuid4().hex}"
        sig, delay = rng.choice(SIGNALS), rng.uniform(1.0, 12.0)
        command = "capture" if trial % 3 == 2 else "replay"
        process = start_casekit(archive, tmpdir, token, command)
        time.sleep(delay)
        process.send_signal(sig)
        try:
            _, stderr = process.communicate(timeout=60)  # "promptly": well under a script's timeout
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"trial {trial}: casekit did not stop within 60 s of {sig.name}")
        assert wait_unmarked(token, within=10) == [], f"trial {trial}: processes left after {sig.name}"
        if sig is signal.SIGKILL:  # nothing can clean up after SIGKILL itself: the next casekit run does
            sweep_stale_batches(tmpdir)
        elif process.returncode == 128 + sig:
            assert f"casekit: stopped by {sig.name}" in stderr
            assert "Traceback" not in stderr
        assert list(tmpdir.iterdir()) == [], f"trial {trial}: left {list(tmpdir.iterdir())} after {sig.name}"
        bundles_whole(archive, originals)
        if (archive / "captured.toml").exists():  # a capture saves whole or not at all
            Archive(archive).load("captured")
        outcomes.append((command, sig.name, round(delay, 1), process.returncode))
    print(f"signal trials: {outcomes}")


HANGING_TORCH = "import time\ntime.sleep(600)  # an import that never ends (a cold disk, a hung NFS mount)\n"


@pytest.mark.process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_torch_imports_stops_casekit_at_once(tmp_path: Path, sig: signal.Signals) -> None:
    """The probes are still importing torch when the signal comes: casekit stops now, not when an import ends
    or its margin (minutes) runs out. Two targets side by side: the main thread that takes the signal waits
    for the threads of both, so each must see the stop while it waits for its import."""
    targets = []
    for name in ("env-a", "env-b"):
        env = tmp_path / name
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        (site,) = (env / "lib").glob("python*/site-packages")
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(HANGING_TORCH)
        (site / "torch-2.13.0.dist-info").mkdir()
        (site / "torch-2.13.0.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n"
        )
        targets += ["--python", str(env / "bin" / "python")]
    archive, tmpdir = tmp_path / "cases", tmp_path / "tmp"
    archive.mkdir()
    tmpdir.mkdir()
    shutil.copy(ROOT / "cases" / "item-branch.toml", archive)
    process = subprocess.Popen(
        [sys.executable, "-m", "casekit", "replay", "--archive", str(archive), *targets],
        env={**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # until both probes are started: each now waits for torch's import
        seen.append(line)
        if sum("warm probe started" in said for said in seen) == 2:
            break
    time.sleep(1.0)
    started = time.monotonic()
    process.send_signal(sig)
    try:
        _, rest = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"casekit did not stop within 30 s of {sig.name} while torch imported: {''.join(seen)}")
    took = time.monotonic() - started
    assert process.returncode == 128 + sig, rest
    assert f"casekit: stopped by {sig.name}" in rest and "Traceback" not in rest
    assert took < 15, f"stopped {took:.1f} s after {sig.name}"
    assert list(tmpdir.iterdir()) == []
