"""A real git repository for tests: commands run with no user config, and a snapshot of its state."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Casekit Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Casekit Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_dirty(repo: Path) -> None:
    """A user in the middle of work: an unstaged edit, a staged file, an untracked file."""
    with (repo / "app.py").open("a") as handle:
        handle.write("# work in progress\n")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "notes.txt").write_text("untracked\n")


def snapshot(repo: Path) -> dict[str, object]:
    """Everything a bisection must not change."""
    return {
        "status": git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"),
        "head": git(repo, "rev-parse", "HEAD"),
        "symbolic_head": git(repo, "symbolic-ref", "-q", "HEAD"),
        "refs": git(repo, "for-each-ref"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "files": {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()},
        "admin": sorted(p.name for p in (repo / ".git").iterdir()),
    }
