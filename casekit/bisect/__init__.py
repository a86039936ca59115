"""Bisection: find the first target (release, nightly, commit) whose outcome differs.

- `search`   the pure search over an ordered candidate list, plus the on-disk result cache;
- `versions` candidate lists of torch versions (parse, sort, select, read from the index);
- `commits`  candidates from the user's own git repository, probed in temporary worktrees.
"""
