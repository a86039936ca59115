"""An explorer: the code reduction's passes running in a process of their own, asking the reducer about
each candidate.

`python -m casekit.reduce.explorer FD` reads its start (the original files and
the trees to start from) on the socket FD, then runs, over each file: whole
included files out; config literals written in place (`constants.py`); whole
statements out, halves first (`statements.py`), each round followed by one try
without what nothing reads any more (`unread.py`); single-use variables written
in place (`variables.py`); pysource-minimize's `minimize_ast` (expressions,
arguments, the rest) until a round changes nothing; variables once more. Each
pass asks about one candidate and waits for the answer, deciding what to try
next from it, so none can batch; the reducer gets `--jobs` candidates at once
by telling a waiting explorer to fork: the copy assumes "not kept" and goes on
to the next question (speculation). If the answer was "not kept", the copy was
right and the original explorer is dropped; if "kept", the copies are dropped.

No candidate runs here: candidates are only built, rendered and compiled (never
executed). What can be refused without running is refused here: a tree that
does not compile, one that only changes constants or names (inputs are shrunk
apart, with their own rules; renames would hide the user's names), one that
uses a name it no longer defines (a certain NameError) and one whose method
reads a `self.` field its class no longer sets (a certain AttributeError).
"""

from __future__ import annotations

import ast
import builtins
import os
import signal
import socket
import symtable
import sys
import warnings
from typing import Any

from casekit.reduce.candidate import render_candidate
from casekit.reduce.constants import inline_literals
from casekit.reduce.lines import OriginalIndex, RenderError
from casekit.reduce.statements import reduce_statements
from casekit.reduce.unread import without_unread
from casekit.reduce.variables import inline_variables
from casekit.reduce.wire import ChannelClosed, receive, send

BUILTIN_NAMES = frozenset(dir(builtins)) | {"__file__", "__name__", "__builtins__", "__doc__", "__spec__"}


def skeleton(tree: ast.AST) -> tuple[Any, ...]:
    """The tree's shape without constant values and variable names (two trees that differ only there match)."""
    out: list[Any] = []
    for node in ast.walk(tree):
        out.append(type(node).__name__)
        for name, value in ast.iter_fields(node):
            if isinstance(node, ast.Constant) and name == "value" or isinstance(node, ast.Name) and name == "id":
                continue
            if isinstance(value, list):
                out.append(len(value))
            elif value is None or isinstance(value, str | int | float | bytes):
                out.append(value)
    return tuple(out)


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


def copy_tree(value: Any) -> Any:
    """A deep copy of an AST (fields, line numbers and the library's node indexes), twice as fast as
    `copy.deepcopy`: the library copies the whole tree for every candidate it tries."""
    if isinstance(value, ast.AST):
        new = value.__class__.__new__(value.__class__)
        fields = new.__dict__
        for key, item in value.__dict__.items():
            fields[key] = copy_tree(item) if isinstance(item, ast.AST | list) else item
        return new
    if isinstance(value, list):
        return [copy_tree(item) if isinstance(item, ast.AST | list) else item for item in value]
    return value


class _FastCopy:
    """Stands in for the `copy` module inside pysource-minimize's base (its only use: deepcopy of trees)."""

    deepcopy = staticmethod(copy_tree)


def use_fast_copy() -> None:
    from pysource_minimize import _minimize_base

    _minimize_base.copy = _FastCopy  # type: ignore[assignment]


class Explorer:
    """One line of the search: the current files, and the channel to the reducer."""

    def __init__(self, sock: socket.socket, start: dict[str, Any]) -> None:
        self.sock = sock
        self.indexes = {name: OriginalIndex(text) for name, text in start["originals"].items()}
        self.current: dict[str, ast.Module | None] = dict(start["trees"])
        self.order: list[str] = list(start["order"])
        self.removable: list[str] = list(start["removable"])
        self.rounds = int(start.get("rounds", 2))
        self.script: str = start.get("script", self.order[0] if self.order else "")
        self.compiled_calls = frozenset(tuple(c) for c in start.get("compiled_calls", ()))
        self.shapes = {name: skeleton(tree) for name, tree in self.current.items() if tree is not None}
        self.unbound = {name: unbound_names(ast.unparse(tree)) for name, tree in self.current.items() if tree}
        self.unset = {name: unset_attributes(tree) for name, tree in self.current.items() if tree}
        self.known: dict[str, bool] = {}

    def search(self) -> None:
        """The passes, coarse to fine (the module's docstring); whole included files are tried again after
        each, as what imported them shrinks."""
        from pysource_minimize import CouldNotMinimize, StopMinimization
        from pysource_minimize._minimize import equal_ast, minimize_ast

        self.remove_files()
        self.say("config literals written in place")
        inline_literals(self.current, self._ask_changed, copy_tree)
        self.say("whole statements, halves first")
        for _ in range(3):  # rounds over every file: a file's definition goes once another file's use has gone
            before = self.dumps()
            for name in self.order:
                tree = self.current.get(name)
                if tree is not None:
                    reduce_statements(tree, self.checker(name), copy_tree, rounds=1)
            self.drop_unread()
            self.remove_files()
            if self.dumps() == before:
                break
        self.write_in_variables()
        self.say("expressions, arguments, the rest (pysource-minimize)")
        for _ in range(self.rounds):
            changed = False
            for name in self.order:
                tree = self.current.get(name)
                if tree is None:
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        reduced = minimize_ast(tree, self.checker(name), retries=0)
                except (CouldNotMinimize, StopMinimization):
                    continue
                if not equal_ast(reduced, tree):
                    changed = True
            if changed:
                self.drop_unread()  # a class whose last use the library's edits took
            else:
                break
        self.write_in_variables()  # what the library's rounds left as `x = ...` read once
        self.remove_files()

    def drop_unread(self) -> None:
        """The script without what nothing reads any more (`unread.py`), bold variant first: once a
        round has taken the loop around the compiled call, what fed it is unread."""
        if self.script not in self.current or self.current[self.script] is None:
            return
        for drop_calls in (True, False):
            trees = without_unread(self.current, self.script, drop_calls, self.compiled_calls)
            tree = trees[self.script]
            current = self.current[self.script]
            if tree is not None and current is not None and ast.dump(tree) != ast.dump(current):
                if self.ask_trees({self.script: tree}):
                    return

    def remove_files(self) -> None:
        """Each included file out whole (its importers may no longer need it)."""
        for name in self.removable:
            if self.current.get(name) is not None and self.ask({**self.current, name: None}):
                self.current[name] = None

    def dumps(self) -> list[str]:
        return [ast.dump(tree) if tree is not None else "-" for tree in self.current.values()]

    def write_in_variables(self) -> None:
        self.say("single-use variables written in place")
        for name in self.order:
            tree = self.current.get(name)
            if tree is not None:
                inline_variables(tree, self.checker(name), copy_tree)

    def say(self, phase: str) -> None:
        send(self.sock, ("phase", phase))

    def run(self) -> None:
        self.search()
        send(self.sock, ("done", None))
        while True:  # the reducer answers "exit" (or closes the channel)
            self.wait_for_answer()

    def checker(self, name: str):  # type: ignore[no-untyped-def]
        """pysource-minimize's test for one file: the whole candidate asked about with that file changed."""

        def check(tree: ast.Module) -> bool:
            current = self.current[name]
            if skeleton(tree) == self.shapes[name]:
                return current is not None and ast.dump(tree) == ast.dump(current)
            return self.ask_trees({name: tree})

        return check

    def ask_trees(self, changed: dict[str, ast.Module | None]) -> bool:
        """Ask about the current files with `changed` in place, unless a changed file is sure to fail
        without running: it does not compile, or it reads a global name it no longer binds."""
        facts = {}
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
            unbound = unbound_names(text)
            if unbound - self.unbound[name]:
                return False
            unset = unset_attributes(tree)
            if unset - self.unset[name]:
                return False
            facts[name] = (skeleton(tree), unbound, unset)
        kept = self.ask({**self.current, **changed})
        if kept:
            self.current.update(changed)
            for name, (shape, unbound, unset) in facts.items():
                self.shapes[name], self.unbound[name], self.unset[name] = shape, unbound, unset
        return kept

    def _ask_changed(self, trees: dict[str, ast.Module | None]) -> bool:
        return self.ask_trees({n: t for n, t in trees.items() if t is not self.current.get(n)})

    def ask(self, trees: dict[str, ast.Module | None]) -> bool:
        try:
            candidate = render_candidate(trees, self.indexes)
        except (RenderError, SyntaxError, ValueError, RecursionError):
            return False
        key = candidate.key
        if key in self.known:
            return self.known[key]
        send(self.sock, ("ask", candidate))
        kept = self.wait_for_answer()
        self.known[key] = kept
        return kept

    def wait_for_answer(self) -> bool:
        while True:
            try:
                message, _ = receive(self.sock)
            except (ChannelClosed, OSError):
                os._exit(0)
            kind = message[0]
            if kind == "answer":
                return bool(message[1])
            if kind == "fork" and self.fork():
                return False  # the copy: it goes on as if the answer were "not kept"
            if kind == "exit":
                os._exit(0)

    def fork(self) -> bool:
        """Fork a copy that goes on speculating; True in the copy. The reducer gets the copy's channel."""
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.sock.close()
            ours.close()
            self.sock = theirs
            return True
        theirs.close()
        send(self.sock, ("forked", pid), fd=ours.fileno())
        ours.close()
        return False


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the reducer's: it ends every explorer
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked copies need no reaping
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))  # deep trees: the library recurses
    use_fast_copy()
    sock = socket.socket(fileno=int(argv[1]))
    try:
        start, _ = receive(sock)
    except ChannelClosed:
        return 0
    Explorer(sock, start).run()
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv))
