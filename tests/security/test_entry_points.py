"""One attack battery over every way casekit runs someone else's script (`ScriptEntry`), for real.

Each entry is driven through its real command (capture, replay with its rollback check, bisect over
releases, bisect-commits, reduce and its confirming run) with a hostile script
(scripts/session_attacks.py): it plants links to two host canaries in every folder it can write
outside its own, forges results, mounts a tmpfs of its own, reads the sandbox's command line and
leaves marks for later runs. The host then checks the canaries (nothing written through a link,
nothing chowned) and the command's own answer (no forged verdict, no mark seen by a later run, the
command finished with its table and JSON). A new way to run scripts adds a `ScriptEntry` member, and
`test_every_entry_point_joins_the_battery` fails until it has a driver here.

The controls beside it (test_session_attacks.py) show each attack working with its protection off.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bundle import load_case, sha256_text
from casekit.model import ScriptRole
from casekit.runners.interface import ScriptEntry

from ..conftest import CASEKIT_PIDS, ROOT, run_casekit
from ..gitrepo import git
from .conftest import SCRIPTS, requires_sandbox

ATTACK = SCRIPTS / "session_attacks.py"


@dataclass
class Canaries:
    """A host folder and a host file no sandbox shows: what a followed link or a chown by path would change."""

    folder: Path
    file: Path

    @classmethod
    def make(cls, where: Path) -> Canaries:
        where.mkdir(parents=True, exist_ok=True)
        folder, file = where / "canary-folder", where / "canary-file"
        folder.mkdir(mode=0o700)
        file.write_text("canary\n")
        os.chmod(file, 0o600)
        return cls(folder, file)

    def changes(self) -> list[str]:
        found = []
        if os.listdir(self.folder):
            found.append(f"written into the canary folder: {sorted(os.listdir(self.folder))}")
        for path, mode in ((self.folder, 0o700), (self.file, 0o600)):
            info = path.lstat()
            if (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
                found.append(f"{path.name} chowned to {info.st_uid}:{info.st_gid}")
            if stat.S_IMODE(info.st_mode) != mode:
                found.append(f"{path.name} mode changed to {oct(stat.S_IMODE(info.st_mode))}")
        if self.file.read_text() != "canary\n":
            found.append("the canary file was overwritten")
        return found


def attack_script(folder: Path, canaries: Canaries, *, breaks: bool = False, name: str = "attack.py") -> Path:
    """The hostile script with the host's canaries filled in."""
    text = ATTACK.read_text().replace("__CANARY_DIR__", str(canaries.folder))
    text = text.replace("__CANARY_FILE__", str(canaries.file)).replace("BREAKS = False", f"BREAKS = {breaks}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def line_of(script: Path, needle: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if needle in line)


def said(process, entry: ScriptEntry) -> bool:
    """The command ran its scripts through a session of `entry` (its progress says so)."""
    return f"warm probe started for {entry.value} " in process.stderr + process.stdout


CLEAN_FIX = """\
import torch


def step(x):
    return x.sin() + 1


torch.compile(step, backend="eager")(torch.ones(3))
"""
ALWAYS_RAISES = 'raise RuntimeError("this fix always raises")\n'


def capture(tmp_path: Path, canaries: Canaries, *extra: str) -> tuple[Path, object]:
    script = attack_script(tmp_path / "repro", canaries)
    archive = tmp_path / "cases"
    done = run_casekit("capture", str(script), "--archive", str(archive), "--id", "attack", "--title", "attack", *extra)
    return archive, done


def drive_capture(tmp_path: Path, canaries: Canaries) -> None:
    archive, done = capture(tmp_path, canaries)
    assert done.returncode == 0, done.stderr[-3000:]
    assert said(done, ScriptEntry.CAPTURE)
    case = load_case(archive / "attack.toml")
    pre = case.observations[ScriptRole.PRE]
    # no run saw an earlier run's mark, none wrote outside its own folder, no mount held: no break at all
    assert pre.sites == [] and case.capture is not None and case.capture.sentinel, pre


def drive_replay(tmp_path: Path, canaries: Canaries) -> None:
    fix = tmp_path / "repro" / "fixed.py"
    fix.parent.mkdir(parents=True, exist_ok=True)
    fix.write_text(CLEAN_FIX)
    archive, done = capture(tmp_path, canaries, "--fixed", str(fix))
    assert done.returncode == 0, done.stderr[-3000:]
    # the fix stops holding: it now raises, eagerly too, so only the pre-fix can roll back (with fullgraph=False)
    case = Archive(archive).load("attack")
    assert case.post is not None
    post = replace(case.post, source=ALWAYS_RAISES, sha256=sha256_text(ALWAYS_RAISES))
    Archive(archive).save(replace(case, post=post))
    document = tmp_path / "replay.json"
    replayed = run_casekit("replay", "--archive", str(archive), "--json", str(document))
    assert replayed.returncode in (0, 1), replayed.stderr[-3000:]
    assert said(replayed, ScriptEntry.REPLAY)
    (result,) = json.loads(document.read_text())["results"]
    rollback = result["rollback"]
    # a rollback result forged by the pre-fix's run (in the request before) would say the post-fix rolls back
    assert rollback["verified"] is True and rollback["path"] == "pre-fix with fullgraph=False", rollback
    sites = [site for script in result["scripts"].values() if script for site in script["sites"]]
    assert all(site["class"] != "new" for site in sites), result


def drive_bisect_releases(tmp_path: Path, canaries: Canaries, old_python: str) -> None:
    archive, done = capture(tmp_path, canaries)
    assert done.returncode == 0, done.stderr[-3000:]
    report = tmp_path / "bisect.json"
    bisected = run_casekit(
        "bisect", "attack", "--good", "2.5.1", "--bad", "2.13.0", "--archive", str(archive),
        "--python-for", f"2.5.1={old_python}", "--python-for", f"2.13.0={sys.executable}",
        "--no-cache", "--json", str(report),
    )  # fmt: skip
    assert said(bisected, ScriptEntry.BISECT_RELEASES), bisected.stderr[-3000:]
    document = json.loads(report.read_text()) if report.exists() else {}
    steps = document.get("steps") or []
    assert [step["ran"] for step in steps] == [True, True], (bisected.stderr[-3000:], document)
    assert document["good_outcome"] == document["bad_outcome"] == "unchanged", document


def drive_bisect_commits(tmp_path: Path, canaries: Canaries) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for revision in range(3):
        script = attack_script(repo, canaries)
        script.write_text(script.read_text() + f"# revision {revision}\n")
        (repo / "data.txt").write_text(f"data {revision}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"revision {revision}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    won_at = line_of(repo / "attack.py", 'print("an attack won")')
    report = tmp_path / "commits.json"
    bisected = run_casekit(
        "bisect-commits", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1],
        "--site", f"attack.py:{won_at}", "--no-cache", "--json", str(report), "--", sys.executable, "attack.py",
    )  # fmt: skip
    assert said(bisected, ScriptEntry.BISECT_COMMITS), bisected.stderr[-3000:]
    # a mark left by one commit's run and seen by a later one would make that commit "bad"
    text = bisected.stdout + bisected.stderr
    document = json.loads(report.read_text()) if report.exists() else {}
    assert not document.get("first_bad"), (text[-3000:], document)
    assert "no change" in text or "agree" in text or document.get("good_outcome") == document.get("bad_outcome")


def drive_reduce(tmp_path: Path, canaries: Canaries) -> None:
    script = attack_script(tmp_path / "big", canaries, breaks=True)
    out = tmp_path / "reduced"
    reduced = run_casekit("reduce", str(script), "--out", str(out), "--max-time", "120", "--jobs", "1")
    assert reduced.returncode == 0, reduced.stderr[-3000:]
    assert said(reduced, ScriptEntry.REDUCE) and said(reduced, ScriptEntry.REDUCE_CONFIRM), reduced.stderr[-3000:]
    assert (out / "attack.py").is_file()


def drive_perf(tmp_path: Path, canaries: Canaries) -> None:
    archive, done = capture(tmp_path, canaries)
    assert done.returncode == 0, done.stderr[-3000:]
    document = tmp_path / "replay.json"
    timed = run_casekit(
        "replay", "--archive", str(archive), "--perf", "--perf-repeats", "cold=1,warm=2", "--json", str(document)
    )
    assert timed.returncode in (0, 1), timed.stderr[-3000:]
    assert said(timed, ScriptEntry.PERF)
    (result,) = json.loads(document.read_text())["results"]
    (entry,) = result["perf"]
    figures = entry["figures"]
    assert figures["processes"] == {"cold": 1, "warm": 2}, figures
    # a mark one process left and a later one saw, a folder outside its own, a mount: a break in the structure
    assert figures["structure"].get("breaks", []) == [], figures["structure"]


DRIVERS: dict[frozenset[ScriptEntry], Callable[..., None]] = {
    frozenset({ScriptEntry.CAPTURE}): drive_capture,
    frozenset({ScriptEntry.REPLAY}): drive_replay,
    frozenset({ScriptEntry.BISECT_RELEASES}): drive_bisect_releases,
    frozenset({ScriptEntry.BISECT_COMMITS}): drive_bisect_commits,
    frozenset({ScriptEntry.REDUCE, ScriptEntry.REDUCE_CONFIRM}): drive_reduce,  # one reduction runs both
    frozenset({ScriptEntry.PERF}): drive_perf,
}


def test_every_entry_point_joins_the_battery() -> None:
    covered = [entry for entries in DRIVERS for entry in entries]
    assert sorted(covered, key=str) == sorted(ScriptEntry, key=str), "an entry without a driver, or one twice"


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
    ]


def test_every_session_names_its_entry_and_nothing_outside_the_runners_runs_a_batch_itself() -> None:
    """Outside casekit/runners/ scripts run only through `open_session(ScriptEntry.X)` (or a session a caller
    opened), never through a runner's own `run_probe`; and every entry is opened somewhere."""
    opened: set[str] = set()
    for path in sorted((ROOT / "casekit").rglob("*.py")):
        if "runners" in path.relative_to(ROOT / "casekit").parts:
            continue
        source = path.read_text()
        tree = ast.parse(source)
        for call in _calls(tree, "open_session"):
            first = ast.unparse(call.args[0]) if call.args else ""
            assert first.startswith("ScriptEntry.") or first == "options.entry", f"{path}: open_session({first})"
            opened.add(first.removeprefix("ScriptEntry."))
        for call in _calls(tree, "run_probe"):
            receiver = ast.unparse(call.func.value)  # type: ignore[attr-defined]
            assert "runner" not in receiver, f"{path}: {receiver}.run_probe runs a batch outside a session"
        opened |= set(re.findall(r"ScriptEntry\.([A-Z_]+)", source))
    assert {entry.name for entry in ScriptEntry} <= opened


@requires_sandbox
@pytest.mark.slow
@pytest.mark.parametrize("entries", list(DRIVERS), ids=["+".join(sorted(e.value for e in k)) for k in DRIVERS])
def test_attacks_through_every_entry_point_hold(entries: frozenset[ScriptEntry], tmp_path: Path, request) -> None:
    canaries = Canaries.make(tmp_path / "host")
    driver = DRIVERS[entries]
    started = len(CASEKIT_PIDS)
    if entries == {ScriptEntry.BISECT_RELEASES}:
        driver(tmp_path, canaries, request.getfixturevalue("torch251_python"))
    else:
        driver(tmp_path, canaries)
    assert canaries.changes() == []
    assert _left_behind(set(CASEKIT_PIDS[started:])) == [], "a finished casekit left its session's folders"
    shutil.rmtree(tmp_path, ignore_errors=True)


def _left_behind(ours: set[int]) -> list[Path]:
    """The session and stage folders of the casekits in `ours` (this test's) whose process is gone. Only
    theirs: a casekit another test killed with SIGKILL on purpose (tests/security/test_signals.py, on another
    worker) leaves its stage in /tmp until the next casekit sweeps it."""
    found = []
    for prefix in ("casekit-session-", "casekit-stage-"):
        for path in Path("/tmp").glob(f"{prefix}*"):
            owner = path.name[len(prefix) :].split("-", 1)[0]
            if owner.isdigit() and int(owner) in ours and not Path(f"/proc/{owner}").exists():
                found.append(path)
    return found
