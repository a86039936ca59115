"""One warm session for a whole commit bisection: the real probe in --serve mode, real torch, a real git history."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from casekit.bisect.commits import CommitBisect, bisect_commits
from casekit.bisect.engine import CacheSettings
from casekit.bisect.predicates import CommitPredicate
from casekit.runners.interface import ProbeJob, ScriptEntry
from casekit.runners.sandbox import Sandbox
from casekit.runners.warm import WarmSession
from casekit.scrub import portable_paths
from tests.gitrepo import git

BREAKS = "import torch\n\n\ndef f(x):\n    y = x.sin()\n    print('hi')\n    return y + 1\n\n\nprint(torch.compile(f, backend='eager')(torch.ones(2)))\n"
MARKS = "import torch\n\ntorch._casekit_mark = 1\nprint('marked')\n"
READS = (
    "import os, torch\n\nassert open('data.txt').read()\n"
    "print('mark seen' if hasattr(torch, '_casekit_mark') else 'clean', os.getcwd())\n"
)


def job(path: Path, name: str, **extra: object) -> ProbeJob:
    return ProbeJob(id=name, script=path, modes=("eager", "compiled"), backend="eager", timeout=60, **extra)  # type: ignore[arg-type]


@pytest.mark.slow
def test_serve_mode_imports_once_and_isolates_every_run(tmp_path: Path) -> None:
    scripts = {}
    for name, text in (("breaks", BREAKS), ("marks", MARKS)):
        scripts[name] = tmp_path / f"{name}.py"
        scripts[name].write_text(text)
    tree = tmp_path / "tree"  # a commit's tree: the job is the whole folder, the script inside it
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "reads.py").write_text(READS)
    (tree / "data.txt").write_text("beside the script\n")
    heard: list[str] = []
    with WarmSession(sys.executable, ScriptEntry.BISECT_COMMITS, Sandbox.from_options()) as probe:
        first = probe.run_probe([job(scripts["breaks"], "breaks"), job(scripts["marks"], "marks")], heard.append)
        started = time.monotonic()
        second = probe.run_probe([job(tree / "src" / "reads.py", "reads", tree=tree)], heard.append)
        second_s = time.monotonic() - started
        assert probe.imports == 1
        root = probe.root
    assert not root.exists(), "the session's folder is removed on close"
    assert sum("warm probe started" in line for line in heard) == 1
    runs = first.results["breaks"]["runs"]
    assert runs["compiled"]["status"] == "ok" and first.environment.get("torch")
    assert "marked" in first.results["marks"]["runs"]["eager"]["stdout_tail"]
    tail = second.results["reads"]["runs"]["eager"]["stdout_tail"]
    # the run starts at the root of its own copy of the tree, as `cd tree && python src/reads.py` would
    assert tail.startswith("clean") and tail.split()[1].endswith("/reads"), "a run never sees what an earlier run did"
    assert second_s < 5, f"a request after the first pays no import ({second_s:.1f} s)"


@pytest.mark.slow
def test_a_dead_warm_probe_is_restarted(tmp_path: Path) -> None:
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    with WarmSession(sys.executable, ScriptEntry.BISECT_COMMITS, Sandbox.from_options()) as probe:
        probe.run_probe([job(script, "a")], lambda message: None)
        assert probe.process is not None
        probe.process.kill()
        probe.process.wait()
        again = probe.run_probe([job(script, "b")], lambda message: None)
        assert probe.imports == 2 and again.results["b"]["runs"]["eager"]["status"] == "ok"


SCRIPT = "import torch\n\n\ndef step(x):\n    y = torch.sin(x)\n    z = y * 2\n{extra}    return z + 1\n\n\nprint(torch.compile(step, backend='eager')(torch.ones(3)).sum().item())\n"


def eight_commits(repo: Path, culprit: int) -> list[str]:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(8):
        extra = "    print('debug', z.shape)\n" if i >= culprit else ""
        (repo / "model.py").write_text(SCRIPT.format(extra=extra) + f"# revision {i}\n")
        git(repo, "add", "model.py")
        git(repo, "commit", "-q", "-m", f"revision {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


@pytest.mark.slow
def test_warm_commit_bisection_gives_the_same_answer_with_one_import(tmp_path: Path) -> None:
    shas = eight_commits(tmp_path / "repo", culprit=5)
    answers = {}
    for warm in (True, False):
        heard: list[str] = []
        config = CommitBisect(
            tmp_path / "repo",
            shas[0],
            shas[-1],
            [sys.executable, "model.py"],
            judge=CommitPredicate(site="model.py:7"),
            cache=CacheSettings(None),
            warm=warm,
        )
        report = bisect_commits(config, progress=heard.append)
        answers[warm] = (report.first_bad, [(s.target, s.outcome) for s in report.steps])
        imports = sum("imported in" in line or "torch 2" in line and "imported" in line for line in heard)
        started = sum("warm probe started" in line for line in heard)
        if warm:
            assert started == 1 and imports == 1, heard
        else:  # a session per commit
            assert started == len(report.steps) and imports == len(report.steps), heard
    assert answers[True] == answers[False] and answers[True][0] == shas[5]


@pytest.mark.slow
def test_serve_protocol_answers_a_bad_request_and_ends_at_end_of_input(tmp_path: Path) -> None:
    import json
    import subprocess

    from casekit.runners.interface import PROBE_PATH

    state, out = tmp_path / "state", tmp_path / "out"
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"schema": "casekit.probe-request/0", "out_dir": str(out), "jobs": []}))
    done = subprocess.run(
        [sys.executable, str(PROBE_PATH), "--serve", str(state)],
        input=f"{request}\n\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((state / "env.json").read_text())["ok"] is True
    answer = json.loads((out / "done.json").read_text())
    assert "unsupported request schema" in answer["error"]
    assert json.loads((out / "env.json").read_text())["warm"] is True


@pytest.mark.slow
def test_the_reproduce_line_names_the_interpreter_the_probe_ran(tmp_path: Path) -> None:
    """The command says `python model.py`, but --python chose the interpreter: the reproduce line runs the
    script with that one (a shared document names it as a label does: no folder of this machine)."""
    from casekit.bisect.report import report_to_json

    shas = eight_commits(tmp_path / "repo", culprit=5)
    config = CommitBisect(
        tmp_path / "repo",
        shas[0],
        shas[-1],
        ["python", "model.py"],
        judge=CommitPredicate(site="model.py:7"),
        cache=CacheSettings(None),
        python=sys.executable,
    )
    report = bisect_commits(config)
    assert report.first_bad == shas[5] and report.reproduce is not None
    assert report.reproduce.endswith(f"&& TORCH_LOGS=graph_breaks {sys.executable} model.py"), report.reproduce
    shared = report_to_json(report)["reproduce"]
    assert sys.executable not in shared and str(tmp_path) not in shared, shared
    assert shared.endswith(f"{portable_paths(sys.executable)} model.py") and "worktree add --detach" in shared
