"""Bisect the commits of the user's own git repository, probing each commit in a temporary worktree.

The user's working tree, index, HEAD and branches are never touched: every
probe gets a fresh detached worktree (`git worktree add --detach`) that is
removed afterwards, even on an exception or Ctrl-C. The user's command follows
the `git bisect run` contract (0 good, 125 skip, 1-127 bad, >=128 abort).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import git

from casekit.bisect.search import (
    UNKNOWN,
    BisectResult,
    Evaluate,
    IsBad,
    Outcome,
    Progress,
    ResultCache,
    bisect_candidates,
    cached,
    differs_from_good,
)
from casekit.errors import BisectError, GitError

GOOD = "good"
BAD = "bad"
SKIP_EXIT_CODE = 125  # git bisect run's "cannot test this commit"
COMMIT_ENV_VAR = "CASEKIT_BISECT_COMMIT"  # lets a command that lives outside the repo know the commit

EvaluateAt = Callable[[Path, str], Outcome]
"""`evaluate_at(worktree_path, sha)`: test one checked-out commit."""


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
    parent = Path(tempfile.mkdtemp(prefix="casekit-bisect-"))
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


def bisect_commits(
    repo_path: Path,
    good: str,
    bad: str,
    evaluate_at: EvaluateAt,
    *,
    is_bad: IsBad = differs_from_good,
    progress: Progress[str] | None = None,
    cache: ResultCache | None = None,
    case_hash: str | None = None,
) -> BisectResult[str]:
    """Find the first first-parent commit after `good` whose outcome differs from good's.

    Each probed commit is checked out into its own temporary worktree and
    `evaluate_at(worktree, sha)` is called there. With `cache` (and a
    `case_hash` naming what is being tested), outcomes are keyed by full SHA
    and a rerun skips the checkout for commits already tested.
    """
    repo_path = Path(repo_path)
    candidates = list_first_parent_commits(repo_path, good, bad)

    def evaluate_in_worktree(sha: str) -> Outcome:
        with temporary_worktree(repo_path, sha) as worktree:
            return evaluate_at(worktree, sha)

    evaluate: Evaluate[str] = evaluate_in_worktree
    if cache is not None:
        if case_hash is None:
            raise BisectError("a result cache needs a case_hash saying what is being tested")
        evaluate = cached(evaluate_in_worktree, cache, case_hash)
    return bisect_candidates(candidates, evaluate, is_bad=is_bad, progress=progress)


def _kill_process_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the command and anything it started, so nothing keeps running in a deleted worktree."""
    if os.name == "posix":
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()
    process.wait()


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
        # because a background group reading the terminal would stop the run.
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise BisectError(f"cannot run '{shown}' in {cwd}: {exc}") from exc
    try:
        code = process.wait(timeout=timeout)
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


def command_evaluator(command: Sequence[str], timeout: float | None = None) -> EvaluateAt:
    """An `evaluate_at` that runs `command` in the worktree, with the commit's SHA in $CASEKIT_BISECT_COMMIT."""
    fixed = list(command)

    def evaluate_at(worktree: Path, sha: str) -> Outcome:
        return run_command_outcome(fixed, worktree, timeout, env={**os.environ, COMMIT_ENV_VAR: sha})

    return evaluate_at
