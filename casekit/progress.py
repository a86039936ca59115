"""Progress a person can read at a glance: rich bars on a terminal, one plain line per step elsewhere.

Every long-running core call takes a `ProgressFn` (a callable taking one message);
`ProgressView` is that callable, so core code needs no change to be shown well:

    with ProgressView.for_stderr() as view:          # the CLI opens one per command
        replay(..., progress=view)                    # plain messages: one line each
        with view.task("torch 2.5.1 wheels", total=2.1e9, unit="bytes") as task:
            task.advance(chunk)                       # a bar with bytes and ETA on a TTY

Conventions a message may follow (runners already do): a "[label] " prefix names
the bar the message belongs to, and "K/N" right after it moves that bar (the probe's
"3/10 case.pre done"). Indented messages are tool output (pip, uv, docker build):
shown only with -v. Quiet (-q) shows nothing but what the command prints itself.

Code that only holds a ProgressFn (a runner's "[label] " wrapper, say) uses
`progress_task(progress, "downloading torch", total=nbytes, unit="bytes")`: a real
bar when it holds the view itself, else "K/N" messages (at most one per tenth), which
the view turns into a bar on a TTY and into a few plain lines elsewhere.

Off a TTY, under NO_COLOR or TERM=dumb, output is one plain line per step with no
control characters, so CI logs and golden files stay stable.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
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
    """One bar (or, off a TTY, a line at its start and its end)."""

    view: ProgressView
    description: str
    total: float | None
    unit: str
    completed: float = 0.0
    task_id: Any = None

    def advance(self, amount: float = 1.0) -> None:
        self.update(self.completed + amount)

    def update(self, completed: float, total: float | None = None) -> None:
        self.completed = completed
        if total is not None:
            self.total = total
        self.view._update(self)


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
            TextColumn("{task.fields[amount]}"),  # "3/10" for steps, "1.2/2.1 GB" for bytes
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
                task = self._tasks.get(label) or self._new_task(label, float(count.group("total")), "steps")
                task.completed, task.total = float(count.group("done")), float(count.group("total"))
                self._render(task)
                return
            self._line(message)

    @contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "steps") -> Iterator[Task]:
        """A bar for work whose size is known (unit "bytes" shows sizes and ETA); plain: a start and end line."""
        with self._lock:
            task = self._new_task(description, total, unit)
        if self._bars is None and self.level is not Verbosity.QUIET:
            self._line(f"{description} ...")
        try:
            yield task
        finally:
            with self._lock:
                self._tasks.pop(description, None)
            if self._bars is None and self.level is not Verbosity.QUIET:
                self._line(f"{description}: done{_amount(task)}")

    def _new_task(self, description: str, total: float | None, unit: str) -> Task:
        task = Task(self, description, total, unit)
        if self._bars is not None:
            task.task_id = self._bars.add_task(description, total=total, amount=_counted(task))
        self._tasks[description] = task
        return task

    def _update(self, task: Task) -> None:
        with self._lock:
            self._render(task)

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
    """How far a task is, in its unit: '3/10' or '1.20/2.10 GB'."""
    if task.unit == "bytes":
        return (
            f"{task.completed / 1e9:.2f}/{task.total / 1e9:.2f} GB" if task.total else f"{task.completed / 1e9:.2f} GB"
        )
    return f"{task.completed:g}/{task.total:g}" if task.total else f"{task.completed:g}"


def _amount(task: Task) -> str:
    if task.unit == "bytes":
        return f" ({task.completed / 1e6:.1f} MB)"
    return f" ({task.completed:g}/{task.total:g})" if task.total else ""


class _MessageTask:
    """A task for a plain ProgressFn: "K/N description" messages, at most one per tenth of the work."""

    def __init__(self, progress: Callable[[str], None], description: str, total: float | None, unit: str) -> None:
        self.progress, self.description, self.total, self.unit = progress, description, total, unit
        self.completed = 0.0
        self._said = -1

    def advance(self, amount: float = 1.0) -> None:
        self.update(self.completed + amount)

    def update(self, completed: float, total: float | None = None) -> None:
        self.completed = completed
        if total is not None:
            self.total = total
        if not self.total:
            return
        tenth = int(10 * min(self.completed, self.total) / self.total)
        if tenth > self._said:
            self._said = tenth
            done, size = (int(self.completed), int(self.total))
            if self.unit == "bytes":
                done, size = int(self.completed // 1e6), int(self.total // 1e6)
            self.progress(f"{done}/{size}{' MB' if self.unit == 'bytes' else ''} {self.description}")


@contextmanager
def progress_task(
    progress: Callable[[str], None], description: str, total: float | None = None, unit: str = "steps"
) -> Iterator[Task | _MessageTask]:
    """A task on whatever progress callable a core function was given (see the module docstring)."""
    if isinstance(progress, ProgressView):
        with progress.task(description, total, unit) as task:
            yield task
        return
    progress(f"{description} ...")
    yield _MessageTask(progress, description, total, unit)
    progress(f"{description}: done")
