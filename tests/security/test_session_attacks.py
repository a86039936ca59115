"""The sandboxed session's rules, attacked one by one, each beside a control that shows the attack working
with that protection off (the battery over every entry point is test_entry_points.py).

- what casekit writes and reads is made fresh and walked without following links (FreshTree, SafeFolder);
- nothing is handed to the sandbox uid where another host process of that uid could race it;
- each run is confined: no capabilities, no namespaces or mounts of its own (seccomp);
- runs write on a size-bounded tmpfs, never the host disk, and nothing one leaves reaches the next;
- the probe is PID 1 of the sandbox: /proc shows no launcher command line naming host folders;
- a library pinned by a bundle never runs on the host, in a build or after it;
- a .pth path line shows nothing outside the environment (a home, `/` through a link, a `//` path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from casekit.fsutil import FreshTree, SafeFolder, UnreadableFile
from casekit.runners import batch as batch_module
from casekit.runners.interface import ProbeJob, ScriptEntry, TargetSpec
from casekit.runners.python import PythonRunner
from casekit.runners.sandbox import Sandbox, locate_bwrap, runtime_of
from casekit.runners.warm import WarmSession

from ..conftest import ROOT, run_casekit
from ..wheels import build_wheel
from .conftest import requires_sandbox
from .test_entry_points import Canaries, attack_script

LOCAL_WHEELS = Path("/opt/wheels")
requires_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sandbox uid is another user's only when casekit runs as root"
)


def attack_report(result: dict) -> dict:
    run = result["runs"]["eager"]
    line = next((x for x in run["stdout_tail"].splitlines() if x.startswith("CASEKIT-ATTACK ")), None)
    assert line is not None, f"no report: status {run['status']}, stderr {run.get('stderr_tail', '')[-800:]}"
    return json.loads(line.split(" ", 1)[1])


# ------------------------------------------------------------------ links planted where casekit writes


def plant_like_a_run(folder: Path, canaries: Canaries) -> None:
    """The attack script run plainly (no sandbox) with `folder` as its working folder: as a run did in the
    warm probe's old state folder, which the runs could write."""
    script = attack_script(folder / "script", canaries)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=folder, capture_output=True, text=True, timeout=300, check=False
    )
    assert "CASEKIT-ATTACK" in done.stdout, done.stderr[-2000:]


@pytest.mark.process
def test_control_links_planted_in_a_writable_state_folder_turn_roots_writes_and_chowns(tmp_path: Path) -> None:
    canaries = Canaries.make(tmp_path / "host")
    state = tmp_path / "state"
    state.mkdir()
    plant_like_a_run(state, canaries)
    # what casekit did before: lay the next request out with exist_ok, write it, hand it over by path
    request = state / "request-1"
    request.mkdir(parents=True, exist_ok=True)
    (request / "request.json").write_text("{}")
    if os.geteuid() == 0:
        os.chown(state / "2", 65534, 65534)
    assert canaries.changes(), "the planted links did not redirect the writes: the attack proves nothing"


@pytest.mark.process
def test_fresh_trees_and_safe_folders_never_follow_what_a_run_planted(tmp_path: Path) -> None:
    canaries = Canaries.make(tmp_path / "host")
    state = tmp_path / "state"
    state.mkdir()
    plant_like_a_run(state, canaries)
    for name in ("request-1", "2", "out", "requests"):
        with pytest.raises(FileExistsError):
            FreshTree(state / name)  # a request folder is made fresh, never reused
    with pytest.raises(UnreadableFile):
        SafeFolder.open(state, "out")  # results are read from a folder opened without following a link
    with FreshTree(state / "fresh") as tree:
        tree.write("request.json", b"{}")
        os.symlink(canaries.file, state / "fresh" / "planted")
        with pytest.raises(FileExistsError):
            tree.write("planted", b"x")  # O_EXCL: never through a link that appeared since
    with SafeFolder.open(state, "fresh") as folder:
        with pytest.raises(UnreadableFile, match="symbolic link"):
            folder.read("planted", 100)
        assert not folder.has("planted") and folder.has("request.json")
    assert canaries.changes() == []


# ------------------------------------------------------------------ the local uid race


def as_uid(uid: int, attempt: str, *args: str) -> dict:
    """Run `attempt` (Python source reading sys.argv) as `uid` on the host, outside any sandbox: a daemon of
    that uid, or any local user who can become it."""
    code = f"import json, os, sys\nos.setgroups([])\nos.setgid({uid})\nos.setuid({uid})\n" + attempt
    done = subprocess.run(
        [sys.executable, "-I", "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


RACE = """
outcomes = {}
for folder in sys.argv[1:]:
    for name, act in (
        ("list", lambda: os.listdir(folder)),
        ("plant", lambda: os.symlink("/etc", os.path.join(folder, "planted"))),
        ("write", lambda: open(os.path.join(folder, "x"), "w").close()),
    ):
        try:
            act()
            outcomes[f"{folder}:{name}"] = "reached"
        except OSError as error:
            outcomes[f"{folder}:{name}"] = "blocked: " + error.strerror
print(json.dumps(outcomes))
"""


@requires_root
@requires_sandbox
@pytest.mark.slow
def test_a_host_process_of_the_sandbox_uid_cannot_reach_a_running_session(tmp_path: Path) -> None:
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    sandbox = Sandbox.from_options()
    with WarmSession(sys.executable, ScriptEntry.REPLAY, sandbox) as session:
        session.run_probe([ProbeJob("a", script, modes=("eager",))], lambda message: None)
        assert session.process is not None and session.process.poll() is None  # the probe is running
        folders = [session.root, session.root / "out", session.root / "in", session.root / "in" / "requests"]
        outcomes = as_uid(sandbox.uid, RACE, *map(str, folders))
    assert all(outcome.startswith("blocked") for outcome in outcomes.values()), outcomes


@requires_root
@pytest.mark.process
def test_control_a_folder_handed_to_the_sandbox_uid_in_tmp_is_that_uids_to_race(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="casekit-control-"))  # what the old hand-over made of a state folder
    try:
        os.chown(folder, 65534, 65534)
        outcomes = as_uid(65534, RACE, str(folder))
        assert outcomes[f"{folder}:plant"] == "reached" and outcomes[f"{folder}:write"] == "reached"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ inside a run


def run_attack(tmp_path: Path, canaries: Canaries, sandbox: Sandbox, requests: int = 1) -> list[dict]:
    script = attack_script(tmp_path / "attack", canaries)
    reports = []
    with WarmSession(sys.executable, ScriptEntry.REPLAY, sandbox) as session:
        for number in range(requests):
            batch = session.run_probe([ProbeJob(f"a{number}", script, modes=("eager",))], lambda message: None)
            reports.append(attack_report(batch.results[f"a{number}"]))
    return reports


@requires_sandbox
@pytest.mark.slow
def test_a_run_is_confined_on_a_tmpfs_of_its_own_and_sees_no_host_path_in_proc(tmp_path: Path) -> None:
    canaries = Canaries.make(tmp_path / "host")
    first, second = run_attack(tmp_path, canaries, Sandbox.from_options(), requests=2)
    for report in (first, second):
        assert report["escaped"] == [] and report["forged"] == [], report
        assert report["mount"].startswith("blocked"), report
        assert report["cwd_fs"] == "tmpfs", report  # the runs' folders: a size-bounded tmpfs, not the host disk
        # pid 1 is the probe: its interpreter's own path may be anywhere (a checkout under /tmp), but no
        # argument names a host folder (the session's stage is /casekit/... inside)
        interpreter, *arguments = report["proc1"].split()
        assert "bwrap" not in report["proc1"] and interpreter == sys.executable, report["proc1"]
        assert not any(a.startswith(tempfile.gettempdir()) or str(tmp_path) in a for a in arguments), arguments
        assert not report["won"]
    assert second["seen_mark"] == [], "a mark the first request's run left reached the second's"
    assert canaries.changes() == []


@requires_sandbox
@pytest.mark.slow
def test_control_without_confinement_a_run_mounts_a_tmpfs_of_any_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Sandbox.run_isolation
    monkeypatch.setattr(Sandbox, "run_isolation", lambda self, python: replace(original(self, python), confine=False))
    (report,) = run_attack(tmp_path, Canaries.make(tmp_path / "host"), Sandbox.from_options())
    assert report["mount"] == "reached" and report["won"], report


@pytest.mark.process
def test_control_a_plain_folder_keeps_a_runs_mark_and_sits_on_the_disk(tmp_path: Path) -> None:
    canaries = Canaries.make(tmp_path / "host")
    script = attack_script(tmp_path / "attack", canaries)
    reports = []
    for _ in range(2):  # two runs in one folder, unsandboxed: the second sees the first's mark
        done = subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True)
        reports.append(json.loads(done.stdout.split("CASEKIT-ATTACK ", 1)[1].splitlines()[0]))
    assert reports[1]["seen_mark"] and reports[1]["won"]
    assert reports[0]["cwd_fs"] != "tmpfs" or str(tmp_path).startswith("/tmp")


@requires_sandbox
@pytest.mark.process
def test_control_bwrap_without_as_pid_1_shows_its_command_line_to_the_sandbox() -> None:
    bwrap = locate_bwrap()
    shown = subprocess.run(
        [bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
         "--", "cat", "/proc/1/cmdline"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert b"bwrap" in shown.stdout and b"--ro-bind" in shown.stdout, shown.stderr


# ------------------------------------------------------------------ a library pinned by a bundle


def pth_wheel(folder: Path, mark: Path) -> Path:
    """A real wheel whose .pth has an import line: any interpreter that starts with its site hook runs it."""
    name = "casekit_pth_mark"
    files = {
        f"{name}.pth": f"import pathlib; pathlib.Path({str(mark)!r}).write_text('the .pth ran here')\n",
        f"{name}/__init__.py": "",
    }
    return build_wheel(folder, name, "1.0", files)


@requires_sandbox
@pytest.mark.slow
@pytest.mark.skipif(not any(LOCAL_WHEELS.glob("torch-2.13.0*.whl")), reason="no local torch 2.13.0 wheel")
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_library_pinned_by_a_bundle_never_runs_on_the_host(tmp_path: Path, installer: str) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for torch_wheel in LOCAL_WHEELS.glob("torch-2.13.0*.whl"):
        os.link(torch_wheel, wheels / torch_wheel.name)  # the local torch beside the hostile wheel
    mark = tmp_path / "host-mark"  # a host path: the sandbox shows no such folder
    pth_wheel(wheels, mark)
    archive = tmp_path / "cases"
    archive.mkdir()
    bundle = (ROOT / "cases" / "tensor-if.toml").read_text()
    pinned = '[environment.packages]\ncasekit-pth-mark = "1.0"\n\n[scripts.pre]\n'  # a library the case recorded
    (archive / "tensor-if.toml").write_text(bundle.replace("[scripts.pre]\n", pinned, 1))
    env = {"CASEKIT_CACHE": str(tmp_path / "cache"), "CASEKIT_INSTALLER": installer}
    done = run_casekit(
        "replay", "--archive", str(archive), "--torch", "2.13.0", "--find-links", str(wheels), "--no-record",
        "--json", str(tmp_path / "replay.json"), env=env, timeout=1200,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]
    (target,) = json.loads((tmp_path / "replay.json").read_text())["targets"]
    assert target["error"] is None and target["runner"] == "venv", target["error"]
    (python,) = (tmp_path / "cache" / "envs").glob("*/bin/python")
    assert list(python.parent.parent.glob("lib/python*/site-packages/casekit_pth_mark.pth")), "the pin was installed"
    assert not mark.exists(), "the pinned wheel's .pth ran on the host"
    # control: the same env's interpreter with its site hook runs the .pth (what asking `python -m pip` did)
    subprocess.run([str(python), "-c", "pass"], check=True, timeout=120)
    assert mark.read_text() == "the .pth ran here"


# ------------------------------------------------------------------ .pth path lines


@requires_sandbox
@pytest.mark.slow
def test_pth_path_lines_show_nothing_outside_the_environment(tmp_path: Path) -> None:
    secret_dir = Path.home() / f".casekit-secret-{uuid.uuid4().hex}"
    secret_dir.mkdir()
    (secret_dir / "secret.txt").write_text("host secret\n")
    env = tmp_path / "env"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        (site,) = (env / "lib").glob("python*/site-packages")
        # torch and what it imports, from this interpreter's folders (outside the env: shown with --allow read)
        torch_sites = tuple(p for p in runtime_of(sys.executable).import_path if Path(p).is_dir())
        os.symlink("/", site / "casekit_root_link")
        lines = {
            "torch.pth": "".join(f"{folder}\n" for folder in torch_sites),
            "home.pth": f"{secret_dir}\n",  # a folder under a home
            "root.pth": "casekit_root_link\n",  # a link to /: judged by its real path
            "slashes.pth": f"/{secret_dir}\n",  # '//…' is the same folder to the kernel
            "above.pth": "../../../..\n",  # above the environment
        }
        for name, text in lines.items():
            (site / name).write_text(text)
        python = str(env / "bin" / "python")
        refused = " ".join(runtime_of(python, torch_sites).refused)
        for name in ("home.pth", "root.pth", "slashes.pth", "above.pth"):
            assert f"named in {name}" in refused, (name, refused)
        assert "named in torch.pth" not in refused  # shown: --allow read names that folder
        script = tmp_path / "look.py"
        script.write_text(
            "import json, os\nfound = {}\n"
            # the secret by its path, through the link to / and with '//'; a host file through the link
            f"for path in ({str(secret_dir / 'secret.txt')!r}, {str(site / 'casekit_root_link') + str(secret_dir / 'secret.txt')!r},"
            f" '/{secret_dir}/secret.txt', {str(site / 'casekit_root_link' / 'etc' / 'shadow')!r}):\n"
            "    try:\n        found[path] = open(path).read(100) if not os.path.isdir(path) else os.listdir(path)\n"
            "    except OSError as error:\n        found[path] = 'blocked: ' + error.strerror\n"
            "print('CASEKIT-LOOK ' + json.dumps(found))\n"
        )
        reports = {}
        for allowed in (torch_sites, (*torch_sites, str(secret_dir))):
            options = tuple(("read", path) for path in allowed)
            runner = PythonRunner(TargetSpec("python", python=python, options=options))
            lines_said: list[str] = []
            batch = runner.run_probe([ProbeJob("look", script, modes=("eager",))], lines_said.append)
            run = batch.results["look"]["runs"]["eager"]
            tail = run["stdout_tail"]
            reports[allowed] = json.loads(tail.split("CASEKIT-LOOK ", 1)[1].splitlines()[0]), lines_said
        looked, said = reports[torch_sites]
        assert all(str(value).startswith("blocked") for value in looked.values()), looked
        assert any(line.startswith("sandbox: not shown:") and str(secret_dir) in line for line in said), said
        # control: the same script reads the secret once that folder is shown on purpose
        looked, _ = reports[(*torch_sites, str(secret_dir))]
        assert looked[str(secret_dir / "secret.txt")] == "host secret\n", looked
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)


def test_the_session_layout_names_every_place_a_run_must_not_see(tmp_path: Path) -> None:
    """The request's places: the requests and the results hidden, the runs' tmpfs read-only but one's own."""
    places = batch_module.RequestPlaces(
        "/casekit/in/requests/1", "/casekit/out/1", "/casekit/runs/1", "/casekit/in",
        ("/casekit/in/requests", "/casekit/out"), private=("/casekit/runs",),
    )  # fmt: skip
    isolation = batch_module.RunIsolation(tmp_size=1 << 20)
    request = batch_module.request_document([ProbeJob("a", tmp_path / "a.py")], places, isolation)
    assert request["isolation"]["hide"] == ["/casekit/in/requests", "/casekit/out"]
    assert request["isolation"]["private"] == ["/casekit/runs"] and request["isolation"]["confine"] is True
    assert request["out_dir"] == "/casekit/out/1" and request["runs_dir"] == "/casekit/runs/1"
