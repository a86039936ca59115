"""An explorer: pysource-minimize running in a process of its own, asking the reducer about each candidate.

`python -m casekit.reduce.explorer FD` reads its start (the original files and
the trees to start from) on the socket FD, then runs pysource-minimize's
`minimize_ast` over each file in turn, its checker asking the reducer and
waiting for the answer. The library decides what to try next from each answer,
so it cannot batch; the reducer gets `--jobs` candidates at once by telling a
waiting explorer to fork: the copy assumes "not kept" and goes on to the next
question (speculation). If the answer was "not kept", the copy was right and
the original explorer is dropped; if "kept", the copies are dropped.

No candidate runs here: candidates are only built, rendered and compiled (never
executed). What can be refused without running is refused here: a tree that
does not compile, one that only changes constants or names (inputs are shrunk
apart, with their own rules; renames would hide the user's names), and one that
uses a name it no longer defines (a certain NameError).
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
from casekit.reduce.lines import OriginalIndex, RenderError
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


def statement_count(tree: ast.AST) -> int:
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.stmt) and not isinstance(node, ast.Pass))


class Explorer:
    """One line of the search: the current files, and the channel to the reducer."""

    def __init__(self, sock: socket.socket, start: dict[str, Any]) -> None:
        self.sock = sock
        self.indexes = {name: OriginalIndex(text) for name, text in start["originals"].items()}
        self.current: dict[str, ast.Module | None] = dict(start["trees"])
        self.order: list[str] = list(start["order"])
        self.removable: list[str] = list(start["removable"])
        self.rounds = int(start.get("rounds", 2))
        self.statements_only = False  # the first stage: only candidates with fewer statements are asked about
        self.shapes = {name: skeleton(tree) for name, tree in self.current.items() if tree is not None}
        self.unbound = {name: unbound_names(ast.unparse(tree)) for name, tree in self.current.items() if tree}
        self.statements = {name: statement_count(tree) for name, tree in self.current.items() if tree is not None}
        self.known: dict[str, bool] = {}

    def search(self) -> None:
        """pysource-minimize over every file, statements first, then everything."""
        from pysource_minimize import CouldNotMinimize, StopMinimization
        from pysource_minimize._minimize import equal_ast, minimize_ast

        for name in self.removable:
            if self.current.get(name) is not None and self.ask({**self.current, name: None}):
                self.current[name] = None
        # Statements first, until nothing more goes: the library minimizes each statement's expressions
        # as it reaches it, which would spend runs on code a later statement's removal makes dead.
        for statements_only in (True, False):
            self.statements_only = statements_only
            for _ in range(self.rounds if not statements_only else 8):
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
                if not changed:
                    break

    def run(self) -> None:
        self.search()
        send(self.sock, ("done", None))
        while True:  # the reducer answers "exit" (or closes the channel)
            self.wait_for_answer()

    def checker(self, name: str):  # type: ignore[no-untyped-def]
        def check(tree: ast.Module) -> bool:
            current = self.current[name]
            shape = skeleton(tree)
            if shape == self.shapes[name]:
                return current is not None and ast.dump(tree) == ast.dump(current)
            if self.statements_only and statement_count(tree) >= self.statements[name]:
                return False
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
            kept = self.ask({**self.current, name: tree})
            if kept:
                self.current[name] = tree
                self.shapes[name], self.unbound[name] = shape, unbound
                self.statements[name] = statement_count(tree)
            return kept

        return check

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
