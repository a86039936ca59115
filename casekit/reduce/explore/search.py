"""The search the passes run in: the best trees, the static refusals, the rendering, one question.

What can be refused without running is refused here: a tree that does not compile, one that uses a
name it no longer defines (a certain NameError) and one whose method reads a `self.` field its class no
longer sets (a certain AttributeError). Everything else is rendered as a candidate and judged by
`judge` (in the explorer: the reducer, over the socket; in tests: a fake at this interface).
"""

from __future__ import annotations

import ast
import builtins
import symtable
import warnings
from collections.abc import Callable, Mapping

from casekit.reduce.facts import Facts
from casekit.reduce.passes.base import Trees
from casekit.reduce.source.candidate import Candidate, render_candidate
from casekit.reduce.source.lines import OriginalIndex, RenderError

BUILTIN_NAMES = frozenset(dir(builtins)) | {"__file__", "__name__", "__builtins__", "__doc__", "__spec__"}


def unbound_names(text: str) -> set[str]:
    """Names some scope reads as globals that the module never binds: a NameError once that code runs.

    `symtable` resolves the scopes (a function's own locals, its enclosing functions', the class
    body's); what is left global must be bound at module level or be a builtin."""
    try:
        top = symtable.symtable(text, "<candidate>", "exec")
    except SyntaxError:
        return set()
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set[str] = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    pending = list(top.get_children())
    while pending:
        table = pending.pop()
        pending.extend(table.get_children())
        for symbol in table.get_symbols():
            if symbol.is_declared_global() and symbol.is_assigned():
                bound.add(symbol.get_name())
            elif symbol.is_global() and symbol.is_referenced():
                read.add(symbol.get_name())
    if "*" in bound or any(s.get_name() == "*" for s in top.get_symbols()):
        return set()  # a star import binds what it likes
    return read - bound - BUILTIN_NAMES


def unset_attributes(tree: ast.Module) -> set[tuple[str, str]]:
    """(class, attribute) for each `self.<attribute>` a method reads that no method of that class sets
    and its body does not define: an AttributeError once that method runs, unless a base class has it
    (so a candidate is refused only for what it newly leaves unset)."""
    missing = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        defined = {
            t.id for s in node.body for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
        }
        defined |= {s.name for s in node.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        read: set[str] = set()
        assigned: set[str] = set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self":
                (assigned if isinstance(inner.ctx, ast.Store | ast.Del) else read).add(inner.attr)
        missing |= {(node.name, attr) for attr in read - assigned - defined}
    return missing


class TreeSearch:
    """The best trees so far and the question about a candidate; `judge` answers for a rendered one."""

    def __init__(
        self,
        facts: Facts,
        trees: Trees,
        judge: Callable[[Candidate], bool],
        say: Callable[[str], None] = lambda phase: None,
    ) -> None:
        self.facts = facts
        self.trees: Trees = dict(trees)
        self.judge = judge
        self.indexes = {name: OriginalIndex(text) for name, text in facts.originals.items()}
        self.finished = False
        self.known: dict[str, bool] = {}
        self.say = say
        self._unbound = {n: unbound_names(ast.unparse(t)) for n, t in self.trees.items() if t is not None}
        self._unset = {n: unset_attributes(t) for n, t in self.trees.items() if t is not None}

    def finishing(self, on: bool) -> None:
        self.finished = on

    def ask(self, trees: Mapping[str, ast.Module | None]) -> bool:
        changed = {n: t for n, t in trees.items() if t is not self.trees.get(n)}
        facts: dict[str, tuple[set[str], set[tuple[str, str]]]] = {}
        for name, tree in changed.items():
            if tree is None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    text = ast.unparse(tree)
                    compile(text, name, "exec")
            except Exception:
                return False
            unbound, unset = unbound_names(text), unset_attributes(tree)
            if unbound - self._unbound.get(name, set()) or unset - self._unset.get(name, set()):
                return False
            facts[name] = (unbound, unset)
        proposed = {**self.trees, **changed}
        try:
            candidate = render_candidate(proposed, self.indexes, self.finished)
        except (RenderError, SyntaxError, ValueError, RecursionError):
            return False
        kept = self.known.get(candidate.key)
        if kept is None:
            kept = self.known[candidate.key] = self.judge(candidate)
        if kept:
            self.trees = proposed
            for name, (unbound, unset) in facts.items():
                self._unbound[name], self._unset[name] = unbound, unset
        return kept
