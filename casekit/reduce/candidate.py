"""A candidate: every reduced file as a tree (original line numbers kept), its text and its line map."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from casekit.reduce.lines import LineMap, OriginalIndex, Rendered, count_code_lines, render


@dataclass
class Candidate:
    """One version of the reduced files; a file mapped to None is left out (an include no longer needed)."""

    files: dict[str, Rendered | None]
    trees: dict[str, ast.Module | None] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        """The content's identity: two candidates with one text are one candidate."""
        digest = hashlib.sha256()
        for name in sorted(self.files):
            rendered = self.files[name]
            digest.update(f"{name}\0{'-' if rendered is None else rendered.text}\0".encode())
        return digest.hexdigest()

    def code_lines(self) -> int:
        return sum(count_code_lines(r.text) for r in self.files.values() if r is not None)

    def lines_of(self, name: str) -> LineMap | None:
        rendered = self.files.get(name)
        return rendered.lines if rendered is not None else None


def render_candidate(trees: Mapping[str, ast.Module | None], indexes: Mapping[str, OriginalIndex]) -> Candidate:
    """Render every tree (RenderError when one cannot be placed)."""
    files = {name: (None if tree is None else render(tree, indexes[name])) for name, tree in trees.items()}
    return Candidate(files, dict(trees))
