"""A git-backed archive: commit bundles with messages that say what changed, read a case's history back.

The archive folder lives in a git repository (the team's, or its own). casekit
commits only the bundles it wrote: whatever else the user has staged stays
staged and out of the commit (`git commit --only -- PATHS`).
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

from casekit.errors import CasekitError, CaseNotFound, GitError
from casekit.model import ReplayRecord, SiteClass

FALLBACK_IDENTITY = {"name": "casekit", "email": "casekit@localhost"}  # CI checkouts often have no user.name


def open_repo(root: Path) -> git.Repo:
    """The git repository that contains the archive folder (a clear error when there is none)."""
    try:
        repo = git.Repo(root.resolve(), search_parent_directories=True)
    except git.NoSuchPathError:
        raise GitError(f"archive folder {root} does not exist") from None
    except git.InvalidGitRepositoryError:
        raise GitError(
            f"archive folder {root} is not inside a git repository: `git init` it (or the folder above) to use --commit and `casekit log`"
        ) from None
    if repo.bare or repo.working_tree_dir is None:
        raise GitError(f"{root}: the repository is bare; casekit commits from a working tree")
    return repo


def _relative(repo: git.Repo, path: Path) -> str:
    work = Path(str(repo.working_tree_dir)).resolve()
    try:
        return path.resolve().relative_to(work).as_posix()
    except ValueError:
        raise GitError(f"{path} is outside the repository at {work}") from None


def _configured(repo: git.Repo, key: str) -> bool:
    """Ask git itself (it honours GIT_CONFIG_GLOBAL and includes, GitPython's reader does not)."""
    try:
        return bool(repo.git.config("--get", key).strip())
    except git.GitCommandError:
        return False


@contextmanager
def _identity(repo: git.Repo) -> Iterator[None]:
    """Commit as the user when git knows them, else as 'casekit' (fresh CI runners have no identity)."""
    env: dict[str, str] = {}
    if not _configured(repo, "user.name") and not os.environ.get("GIT_AUTHOR_NAME"):
        env.update(GIT_AUTHOR_NAME=FALLBACK_IDENTITY["name"], GIT_COMMITTER_NAME=FALLBACK_IDENTITY["name"])
    if not _configured(repo, "user.email") and not os.environ.get("GIT_AUTHOR_EMAIL") and not os.environ.get("EMAIL"):
        env.update(GIT_AUTHOR_EMAIL=FALLBACK_IDENTITY["email"], GIT_COMMITTER_EMAIL=FALLBACK_IDENTITY["email"])
    with repo.git.custom_environment(**env):
        yield


def _git_error(action: str, error: git.GitCommandError) -> GitError:
    detail = str(error.stderr or error.stdout or "").strip().removeprefix("stderr:").strip(" '\n")
    return GitError(f"git {action} failed: {detail or f'exit status {error.status}'}")


def commit_paths(root: Path, paths: Sequence[Path], message: str) -> str:
    """Commit exactly these bundle files in the repository that holds `root`; returns a one-line summary.

    Other changes the user staged are left staged and are not part of the commit.
    Bundles that did not change make no commit.
    """
    repo = open_repo(root)
    relative = sorted({_relative(repo, Path(p)) for p in paths})
    if not relative:
        return "nothing to commit: no bundles given"
    missing = [p for p in relative if not (Path(str(repo.working_tree_dir)) / p).exists()]
    if missing:
        raise GitError(f"cannot commit {', '.join(missing)}: no such file")
    try:
        repo.git.add("--", *relative)
        if repo.head.is_valid():
            changed = repo.git.diff("--cached", "--name-only", "HEAD", "--", *relative).split()
        else:
            changed = relative  # the first commit of the repository
        if not changed:
            return f"nothing to commit: {len(relative)} bundle(s) unchanged"
        with _identity(repo):
            repo.git.commit("--only", "-m", message, "--", *changed)
    except git.GitCommandError as error:
        raise _git_error("commit", error) from None
    sha = repo.head.commit.hexsha
    return f"committed {sha[:12]} ({len(changed)} bundle(s)): {message.splitlines()[0]}"


# ------------------------------------------------------------------ case log


@dataclass
class LogEntry:
    """One event in a case's history: a commit touching its bundle, a replay record, its capture."""

    at: dt.datetime
    kind: str  # "commit" | "replay" | "capture" | "uncommitted"
    summary: str
    sha: str | None = None
    author: str | None = None


def _parse_time(text: str) -> dt.datetime | None:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def replay_summary(record: ReplayRecord) -> str:
    counts = Counter(v.site_class.value for v in record.sites if v.site_class is not SiteClass.PERSISTS)
    classes = ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
    statuses = " ".join(f"{which}:{status}" for which, status in record.statuses.items())
    return (
        f"replay on {record.target} (torch {record.torch}): {record.verdict}/{record.severity.value} [{statuses}]"
        + (f" {classes}" if classes else "")
    )


def case_log(root: Path, case_id: str) -> list[LogEntry]:
    """A case's history, newest first: git commits of its bundle merged with the bundle's replay records.

    Works on an archive outside git too (replay records only); a case that exists
    only in git history (bundle deleted) shows its commits.
    """
    from casekit.archive.store import Archive, not_found

    archive = Archive(root)
    path = archive.path_for(case_id)
    entries: list[LogEntry] = []
    case = archive.load(case_id) if path.exists() else None
    if case is not None:
        for record in case.replays:
            at = _parse_time(record.at)
            if at is not None:
                entries.append(LogEntry(at, "replay", replay_summary(record)))
        created = _parse_time(case.created) if case.created else None
        if created is not None:
            entries.append(LogEntry(created, "capture", f"captured: {case.title}"))
    try:
        repo: git.Repo | None = open_repo(root)
    except GitError:
        repo = None
    if repo is not None:
        relative = _relative(repo, path)
        try:
            commits = list(repo.iter_commits(paths=relative)) if repo.head.is_valid() else []
        except git.GitCommandError as error:
            raise _git_error("log", error) from None
        for commit in commits:
            entries.append(
                LogEntry(
                    commit.committed_datetime,
                    "commit",
                    str(commit.summary),
                    sha=commit.hexsha,
                    author=str(commit.author.name),
                )
            )
        if path.exists():
            dirty = relative in repo.untracked_files or bool(repo.git.status("--porcelain", "--", relative).strip())
            if dirty:
                entries.append(
                    LogEntry(dt.datetime.now(dt.UTC), "uncommitted", "the bundle has changes not committed yet")
                )
    if case is None and not entries:
        raise CaseNotFound(not_found(case_id, root, archive.ids(), " and none in its git history"))
    entries.sort(key=lambda e: e.at, reverse=True)
    return entries


def log_text(case_id: str, entries: list[LogEntry]) -> str:
    """`casekit log ID` as text: one line per event, newest first."""
    if not entries:
        return f"{case_id}: no history yet"
    lines = []
    for entry in entries:
        when = entry.at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")
        tag = entry.sha[:10] if entry.sha else entry.kind
        who = f" ({entry.author})" if entry.author else ""
        lines.append(f"{when}  {tag:11} {entry.summary}{who}")
    return "\n".join(lines)


def require_repo(root: Path) -> None:
    """Fail early (before a long replay) when --commit cannot work."""
    try:
        open_repo(root)
    except GitError as error:
        raise CasekitError(f"--commit: {error}") from None
