"""The last step: the result as it is written, with the original's comments of the kept lines, formatted.

One candidate: the same trees, rendered finished (`source/finish.py`). Comments and formatting do not
change what runs, but the oracle judges this candidate too; if it refused it, the result would stay
as the steps before left it.
"""

from __future__ import annotations

from casekit.reduce.passes.base import Search


def run(search: Search) -> None:
    search.finishing(True)
    if not search.ask(search.trees):
        search.finishing(False)
