"""Bisection: find the first target (release, nightly, commit) whose outcome differs.

- `search`     the pure search over an ordered candidate list (Yes/No/Unknown), alone or shared by many;
- `predicates` what "the outcome changed" means, and which way (fix or regression);
- `engine`     evaluate each candidate once, through the on-disk cache of what it showed;
- `releases`   candidates are torch versions: each one a replay of the case;
- `shared`     many cases over one candidate list: one round (one probe) per release for all that need it;
- `ahead`      building the next candidates' envs in the background while a release runs;
- `perf`       --perf: each candidate's timing against the good end's, side by side (never cached);
- `commits`    candidates are the user's commits, probed in temporary worktrees;
- `warm`       one probe (`probe.py --serve`, one torch import) for every commit of a bisection;
- `report`     what changed (classified as replay does), the text, the casekit.bisect/1 document;
- `versions`   torch version lists (parse, sort, select, read from the index);
- `plan`       what each command decides around the search: one case or many, documents, exit code, Ctrl-C.
"""
