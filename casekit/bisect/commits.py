"""Bisect the commits of the user's own git repository, probing each commit in a temporary worktree.

Probe mode: the user's script is observed by the probe at each commit: the
commit's tree is the job, and each run (eager, compiled) starts in a fresh copy of
it in the sandbox, from its root, so nothing a run leaves reaches the next run or
the next commit; exit-code mode: any command, judged by `git bisect run`'s contract
(the user's own command, run as they would run it).

The user's working tree, index, HEAD and branches are never touched: every
probe gets a fresh detached worktree (`git worktree add --detach`) that is
removed afterwards, even on an exception or Ctrl-C. The user's command follows
the `git bisect run` contract (0 good, 125 skip, 1-127 bad, >=128 abort).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import git

from casekit.bisect.engine import (
    CacheSettings,
    Evaluated,
    Evaluator,
    Fresh,
    Record,
    Subject,
    observations_from_record,
    observations_record,
    quiet,
    registry_runner,
    search_range,
    unknown_record,
)
from casekit.bisect.predicates import BAD, GOOD, CommitPredicate
from casekit.bisect.report import BisectReport, ReportHeader, build_report
from casekit.bisect.search import UNKNOWN, Outcome
from casekit.bundle import sha256_text
from casekit.errors import BisectError, CasekitError, EnvironmentFailed, GitError
from casekit.model import ScriptSource
from casekit.observe.batch import observe_batch
from casekit.runners import registry
from casekit.runners.interface import ProbeJob, ProbeSession, ProgressFn, Runner, RunnerFactory, ScriptEntry
from casekit.scrub import temp_prefix
from casekit.terminal import inert

SKIP_EXIT_CODE = 125  # git bisect run's "cannot test this commit"
COMMIT_ENV_VAR = "CASEKIT_BISECT_COMMIT"  # lets a command that lives outside the repo know the commit


def _open_repo(repo_path: Path) -> git.Repo:
    try:
        return git.Repo(repo_path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise GitError(f"{repo_path} is not a git repository") from exc


def _git(repo: git.Repo, *args: str) -> str:
    """Run git in `repo` with hooks disabled: the user's hooks must not fire on our checkouts."""
    command = ["git", "-c", f"core.hooksPath={os.devnull}", "-c", "advice.detachedHead=false", *args]
    try:
        return str(repo.git.execute(command))
    except git.GitCommandError as exc:
        detail = str(exc.stderr or "").strip().removeprefix("stderr:").strip(" '\n") or f"exit {exc.status}"
        raise GitError(f"git {' '.join(args)} failed in {repo.working_dir}: {detail}") from exc


def _resolve_commit(repo: git.Repo, ref: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    except GitError as exc:
        raise GitError(f"{ref!r} is not a commit in {repo.working_dir}") from exc


def list_first_parent_commits(repo_path: Path, good: str, bad: str) -> list[str]:
    """Full SHAs oldest first: `good`, then the first-parent commits after it up to and including `bad`.

    First parents only, like cargo-bisect-rustc's walk of merge commits: a
    merged branch is tested as its merge commit, so every candidate is a state
    the mainline actually had.
    """
    repo = _open_repo(Path(repo_path))
    good_sha, bad_sha = _resolve_commit(repo, good), _resolve_commit(repo, bad)
    if good_sha == bad_sha:
        raise BisectError(f"good {good!r} and bad {bad!r} are the same commit ({good_sha[:12]})")
    try:
        _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except GitError as exc:
        raise BisectError(f"good {good!r} is not an ancestor of bad {bad!r}; nothing to bisect between them") from exc
    after_good = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
    return [good_sha, *after_good]


def commit_summary(repo_path: Path, sha: str) -> str:
    """'<short sha> <subject>', for reports."""
    return _git(_open_repo(Path(repo_path)), "log", "-1", "--format=%h %s", sha)


def _forget_worktree(repo: git.Repo, worktree: Path) -> None:
    """Drop git's record of one of our worktrees whose folder is gone (not `git worktree prune`,
    which would also prune the user's own worktrees on, say, an unmounted disk)."""
    admin_root = Path(repo.common_dir) / "worktrees"
    target = (worktree / ".git").resolve()
    for admin in admin_root.glob("*"):
        gitdir_file = admin / "gitdir"
        with suppress(OSError):
            if Path(gitdir_file.read_text().strip()).resolve() == target:
                shutil.rmtree(admin, ignore_errors=True)


@contextmanager
def temporary_worktree(repo_path: Path, sha: str) -> Iterator[Path]:
    """A detached checkout of `sha` in a fresh temporary folder, removed on exit whatever happens."""
    repo = _open_repo(Path(repo_path))
    parent = Path(tempfile.mkdtemp(prefix=temp_prefix("bisect")))
    worktree = parent / sha[:12]
    try:
        _git(repo, "worktree", "add", "--detach", str(worktree), sha)
        yield worktree
    finally:
        # `remove` refuses worktrees with submodules; deleting the folder and our
        # admin entry is the fallback that always works.
        with suppress(GitError):
            if worktree.exists():
                _git(repo, "worktree", "remove", "--force", "--force", str(worktree))
        shutil.rmtree(parent, ignore_errors=True)
        _forget_worktree(repo, worktree)


def _kill_process_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the command and anything it started, so nothing keeps running in a deleted worktree."""
    if os.name == "posix":
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()
    process.wait()


def _relay_output(pipe: IO[bytes] | None) -> None:
    """The command's output to casekit's stderr, a line at a time, with no control sequence left."""
    if pipe is None:
        return
    with pipe:
        for line in pipe:
            sys.stderr.write(inert(line.decode("utf-8", "replace")))
            sys.stderr.flush()


def run_command_outcome(
    command: Sequence[str],
    cwd: Path,
    timeout: float | None = None,
    *,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run a user's test command with `git bisect run`'s contract.

    Exit 0 is GOOD, 125 is UNKNOWN (skip), 1-127 is BAD. Exit 128 or more, a
    signal, a timeout or a command that cannot start raise BisectError: those
    mean the test itself broke, and guessing a verdict would mislead the search.
    """
    if not command:
        raise BisectError("no command given to test each commit")
    shown = " ".join(command)
    try:
        # Own process group so a timeout can kill grandchildren too; stdin closed
        # because a background group reading the terminal would stop the run. Its output is the
        # repository's text: shown through casekit's terminal (no control sequence reaches it).
        process = subprocess.Popen(
            list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        raise BisectError(f"cannot run '{shown}' in {cwd}: {exc}") from exc
    relay = threading.Thread(target=_relay_output, args=(process.stdout,), daemon=True)
    relay.start()
    try:
        code = process.wait(timeout=timeout)
        relay.join(timeout=5)
    except subprocess.TimeoutExpired as exc:
        _kill_process_group(process)
        raise BisectError(
            f"'{shown}' did not finish within {timeout:g}s in {cwd}; aborting "
            f"(to skip a hanging commit, have the command time out itself and exit {SKIP_EXIT_CODE})"
        ) from exc
    except BaseException:
        _kill_process_group(process)  # Ctrl-C: the child is not in the terminal's group, so stop it here
        raise
    if code == 0:
        return GOOD
    if code == SKIP_EXIT_CODE:
        return UNKNOWN
    if 1 <= code <= 127:
        return BAD
    how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
    raise BisectError(
        f"'{shown}' {how} in {cwd}; exit codes of 128 and above abort the bisection, as in git bisect run"
    )


# ------------------------------------------------------------------ a bisection over commits


def split_probe_command(command: Sequence[str]) -> tuple[str | None, str, list[str]]:
    """`python train.py --steps 2` -> (interpreter or None, 'train.py', ['--steps', '2']).

    The script is the last argument ending in .py; what follows it are the
    script's own arguments. The interpreter is the first word when it names a
    python ('python', 'python3.11', '/opt/venv/bin/python'), else None.
    """
    words = list(command)
    scripts = [i for i, word in enumerate(words) if word.endswith(".py")]
    if not scripts:
        raise BisectError(
            f"no .py script in the command {' '.join(words)!r}: the probe observes a python script "
            "(e.g. -- python model.py); for any other command pass --exit-code"
        )
    index = scripts[-1]
    interpreter = words[0] if index > 0 and Path(words[0]).name.startswith("python") else None
    return interpreter, words[index], words[index + 1 :]


@dataclass(frozen=True)
class CommitBisect:
    """Everything a user chooses for a bisection over the first-parent commits of a repository."""

    repo: Path
    good: str
    bad: str
    command: Sequence[str]
    judge: CommitPredicate = field(default_factory=CommitPredicate)
    python: str | None = None  # the probe's interpreter [default: the command's python, else this one]
    backend: str = "eager"
    timeout: float = 300.0
    cache: CacheSettings = field(default_factory=CacheSettings)
    warm: bool = True  # one probe (one torch import) for every commit; False: a fresh probe per commit


@dataclass
class _ProbeSetup:
    """Probe mode's parts of the command: the script (repository-relative), its arguments, the interpreter."""

    script: str = ""
    argv: list[str] = field(default_factory=list)
    interpreter: str = ""
    runner: Runner | None = None
    session: ProbeSession | None = None  # opened at the first commit probed, closed when the bisection ends


def _probe_setup(config: CommitBisect) -> _ProbeSetup:
    if config.judge.exit_code:
        return _ProbeSetup()
    named, script, argv = split_probe_command(config.command)
    return _ProbeSetup(script, argv, config.python or named or sys.executable)


def _subject_name(config: CommitBisect, setup: _ProbeSetup) -> str:
    """The cache subject: what is run at each commit, hashed (the predicate is applied at read time)."""
    identity: dict[str, object]
    if config.judge.exit_code:
        identity = {"mode": "exit-code", "command": list(config.command)}
    else:
        identity = {
            "mode": "probe",
            "script": setup.script,
            "argv": setup.argv,
            "python": setup.interpreter,
            "backend": config.backend,
        }
    return "commits:" + sha256_text(json.dumps(identity, sort_keys=True))[:16]


def _probe_commit(
    config: CommitBisect, setup: _ProbeSetup, worktree: Path, make_runner: RunnerFactory, progress: ProgressFn
) -> Fresh:
    """Observe the user's script at one commit: the commit's tree is the job (each run starts in a fresh
    copy of it, from its root, as the user's command ran), in one session of one runner for all commits
    (warm: one torch import), or a session per commit (--no-warm)."""
    script = worktree / setup.script
    if not script.is_file():
        return Fresh(unknown_record(f"no {setup.script} at this commit"))
    job = ProbeJob(
        id="commit",
        script=script,
        backend=config.backend,
        timeout=config.timeout,
        argv=tuple(setup.argv),
        tree=worktree,
    )
    source = script.read_text(encoding="utf-8", errors="replace")
    if setup.runner is None:  # the interpreter is checked (and torch's version read) once
        runner = make_runner(registry.interpreter_target(setup.interpreter))
        try:
            runner.prepare(progress)
        except EnvironmentFailed as error:
            raise BisectError(f"cannot observe the script with {setup.interpreter}: {error}") from error
        setup.runner = runner
    try:
        if config.warm:
            if setup.session is None:
                setup.session = setup.runner.open_session(ScriptEntry.BISECT_COMMITS)
            batch = setup.session.run_probe([job], progress)
        else:
            with setup.runner.open_session(ScriptEntry.BISECT_COMMITS) as session:
                batch = session.run_probe([job], progress)
    except CasekitError as error:
        return Fresh(unknown_record(f"the probe could not run: {error}"), cacheable=False)
    observation = observe_batch(batch, job, ScriptSource(script.name, sha256_text(source), source))
    return Fresh(observations_record({"script": observation}))


def _commit_subject(
    config: CommitBisect, make_runner: RunnerFactory, progress: ProgressFn, setup: _ProbeSetup
) -> Subject:
    labels: dict[str, str] = {}

    def run_fresh(sha: str) -> Fresh:
        with temporary_worktree(config.repo, sha) as worktree:
            if not config.judge.exit_code:
                return _probe_commit(config, setup, worktree, make_runner, progress)
            env = {**os.environ, COMMIT_ENV_VAR: sha}
            outcome = run_command_outcome(config.command, worktree, config.timeout, env=env)
            if outcome is UNKNOWN:
                return Fresh(unknown_record("the command exited 125 (skip)"))
            return Fresh({"v": 1, "exit": str(outcome)})

    def interpret(sha: str, record: Record) -> Evaluated | None:
        if "unknown" in record:
            return Evaluated(UNKNOWN, str(record["unknown"]), {})
        if "exit" in record:
            return Evaluated(str(record["exit"]), "", {})
        observations = observations_from_record(record)
        if observations is None or "script" not in observations:
            return None
        outcome, detail = config.judge.outcome(observations["script"])
        return Evaluated(outcome, detail, observations)

    def label(sha: str) -> str:
        if sha not in labels:
            labels[sha] = commit_summary(config.repo, sha)
        return labels[sha]

    return Subject(_subject_name(config, setup), str, run_fresh, interpret, label)


def bisect_commits(
    config: CommitBisect, *, make_runner: RunnerFactory | None = None, progress: ProgressFn = quiet
) -> BisectReport:
    """Find the first commit (first-parent, oldest first) after good where the outcome differs from good's.

    Probe mode (default): the command is `[python] SCRIPT.py [ARGS...]`; the
    script is observed by the probe at each commit, run in place in a
    temporary worktree with the worktree as working directory. Exit-code mode:
    any command, `git bisect run`'s contract (0 good, 125 skip, 1-127 bad).
    The user's working tree is never touched.
    """
    if not config.command:
        raise BisectError("no command given to run at each commit (put it after --)")
    candidates = list_first_parent_commits(config.repo, config.good, config.bad)
    setup = _probe_setup(config)
    subject = _commit_subject(config, make_runner or registry_runner(), progress, setup)
    evaluate = Evaluator(subject, config.cache, progress)
    what = config.judge.describe()
    first, last = evaluate.label(candidates[0]), evaluate.label(candidates[-1])
    progress(f"bisecting {len(candidates)} commit(s) of {config.repo} by {what}: {first} … {last}")
    try:
        result = search_range(candidates, evaluate)
    finally:
        if setup.session is not None:
            setup.session.close()
    probed = registry.interpreter_target(setup.interpreter)
    runner = "exit-code" if config.judge.exit_code else registry.label(probed)
    header = ReportHeader("commits", " ".join(config.command), what, runner, config.judge.hint())
    report = build_report(header, candidates, evaluate, result, config.judge.case, config.judge.direction)
    if result is not None:
        if report.changed is not None:
            report.changed.lines += files_changed(config.repo, result.last_good, result.first_bad)
        report.reproduce = _commit_command(config, result.first_bad, setup)
        for sha in (*result.ambiguous, result.first_bad, result.last_good):
            evaluate.label(sha)
    report.labels = {sha: evaluate.label(sha) for sha in candidates if sha in evaluate.done}
    return report


def files_changed(repo: Path, last_good: str, first_bad: str) -> list[str]:
    """'files changed A..B: x.py, y.py' for the report, or nothing when git cannot tell."""
    try:
        names = _git(_open_repo(repo), "diff", "--name-only", last_good, first_bad).split()
    except GitError:
        return []
    return [f"files changed {last_good[:12]}..{first_bad[:12]}: " + ", ".join(names)] if names else []


def _commit_command(config: CommitBisect, sha: str, setup: _ProbeSetup) -> str:
    """The commands that show the first bad commit by hand: its worktree, then the script run by the
    interpreter the probe ran it with (the command's own `python` word may not be the one: --python, or
    casekit's interpreter when the command named none); an exit-code command as it was given."""
    folder = f"/tmp/casekit-{sha[:12]}"
    if config.judge.exit_code:
        run = shlex.join(config.command)
    else:
        run = "TORCH_LOGS=graph_breaks " + shlex.join([setup.interpreter, setup.script, *setup.argv])
    return f"git -C {shlex.quote(str(config.repo))} worktree add --detach {folder} {sha[:12]} && cd {folder} && {run}"
