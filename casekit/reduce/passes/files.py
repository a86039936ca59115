"""Whole included files out, one at a time: once what imported a file has shrunk, it may not be needed."""

from __future__ import annotations

from casekit.reduce.passes.base import Search


def run(search: Search) -> None:
    for name in search.facts.removable:
        if search.trees.get(name) is not None:
            search.ask({name: None})
