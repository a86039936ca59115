"""Progress a person can read at a glance: rich bars on a terminal, one plain line per step elsewhere.

Every long-running core call takes a `ProgressFn` (a callable taking one message);
`ProgressView` is that callable, so core code needs no change to be shown well:

    with ProgressView.for_stderr() as view:          # the CLI opens one per command
        replay(..., progress=view)                    # plain messages: one line each

Conventions a message may follow (runners already do): a "[label] " prefix names
the bar the message belongs to, and "K/N" right after it moves that bar (the probe's
"3/10 case.pre done"). Indented messages are tool output (pip, uv, docker build):
shown only with -v. Quiet (-q) shows nothing but what the command prints itself.

Off a TTY, under NO_COLOR or TERM=dumb, output is one plain line per step with no
control characters, so CI logs and golden files stay stable.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # rich is imported only when a terminal shows bars
    from rich.progress import Progress


class Verbosity(IntEnum):
    """How much the commands say besides their result: -q, default, -v."""

    QUIET = 0
    NORMAL = 1
    VERBOSE = 2


_verbosity = Verbosity.NORMAL
_COUNT = re.compile(r"^(?:\[(?P<label>[^\]]+)\] )?(?P<done>\d+)/(?P<total>\d+)\b")
_LABEL = re.compile(r"^\[(?P<label>[^\]]+)\] (?P<rest>.*)$", re.S)


def set_verbosity(level: Verbosity) -> None:
    """The global -q / -v choice (set once by the CLI callback)."""
    global _verbosity
    _verbosity = Verbosity(level)


def verbosity() -> Verbosity:
    return _verbosity


def plain_output(stream: TextIO) -> bool:
    """True when output must stay plain: not a terminal, NO_COLOR set, or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return True
    isatty = getattr(stream, "isatty", None)
    return not (isatty and isatty())


@dataclass
class Task:
    """One bar on a terminal: a label's "K/N" messages move it."""

    description: str
    total: float
    completed: float = 0.0
    task_id: Any = None


@dataclass
class ProgressView:
    """A ProgressFn that renders: bars on a TTY, one plain line per step otherwise."""

    stream: TextIO
    plain: bool = True
    level: Verbosity = Verbosity.NORMAL
    _bars: Progress | None = None
    _tasks: dict[str, Task] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    @contextmanager
    def for_stderr(cls, stream: TextIO | None = None) -> Iterator[ProgressView]:
        """The view a command uses: stderr, plain or live by the rules above, the global verbosity."""
        out = stream or sys.stderr
        view = cls(out, plain=plain_output(out), level=verbosity())
        view.start()
        try:
            yield view
        finally:
            view.stop()

    def start(self) -> None:
        if self.plain or self.level is Verbosity.QUIET:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        console = Console(file=self.stream)
        self._bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[amount]}"),  # "3/10"
            TimeRemainingColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._bars.start()

    def stop(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    def __call__(self, message: str) -> None:
        """One progress message (the ProgressFn interface)."""
        if self.level is Verbosity.QUIET:
            return
        detail = message.startswith((" ", "\t")) or bool(_LABEL.match(message) and message.split("] ", 1)[1][:1] == " ")
        if detail and self.level < Verbosity.VERBOSE:
            return
        with self._lock:
            count = _COUNT.match(message)
            if count and self._bars is not None:
                label = count.group("label") or "progress"
                task = self._tasks.get(label) or self._new_task(label, float(count.group("total")))
                task.completed, task.total = float(count.group("done")), float(count.group("total"))
                self._render(task)
                return
            self._line(message)

    def _new_task(self, description: str, total: float) -> Task:
        task = Task(description, total)
        if self._bars is not None:
            task.task_id = self._bars.add_task(description, total=total, amount=_counted(task))
        self._tasks[description] = task
        return task

    def _render(self, task: Task) -> None:
        if self._bars is not None and task.task_id is not None:
            self._bars.update(task.task_id, completed=task.completed, total=task.total, amount=_counted(task))

    def _line(self, message: str) -> None:
        if self._bars is not None:
            self._bars.console.print(message, markup=False, highlight=False)
        else:
            self.stream.write(f"  ... {message}\n")
            self.stream.flush()


def _counted(task: Task) -> str:
    """How far a task is: '3/10'."""
    return f"{task.completed:g}/{task.total:g}"
