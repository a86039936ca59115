"""Bisection: find the first target (release, nightly, commit) whose outcome differs.

- `search`     the pure search over an ordered candidate list (Yes/No/Unknown);
- `predicates` what "the outcome changed" means, and which way (fix or regression);
- `engine`     evaluate each candidate once, through the on-disk cache of what it showed;
- `releases`   candidates are torch versions: each one a replay of the case;
- `commits`    candidates are the user's commits, probed in temporary worktrees;
- `report`     what changed (classified as replay does), the text, the casekit.bisect/1 document;
- `versions`   torch version lists (parse, sort, select, read from the index).
"""
