"""Where a target's torch comes from, in one place: what `--torch`/`--cuda` ask, which index serves it,
reading that index, and which build the request means there.

- `request`: the channel, the variant and the version a request names; the one rule of what an exact
  version is and what a prefix or a build label admits (`VersionAsk`);
- `source`: the index a channel and variant map to (PyTorch's, a mirror, PyPI, the user's own);
- `index`: the one reader of package indexes (PEP 691 JSON, PEP 503 HTML, find-links folders and pages),
  configured as pip and uv are (indexes, find-links, the CA bundle, a proxy), bounded by
  `casekit.runners.index_fetch`;
- `builds`: the wheels a listing holds, the tags an interpreter installs, nightlies by date;
- `pick`: which build a request means in a listing (a prefix, an exact version, a date, below the
  listing's horizon).

This package's `__init__` imports nothing: its modules import each other directly.
"""
