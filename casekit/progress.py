"""Progress a person can read at a glance: rich bars on a terminal, one plain line per step elsewhere.

Every long-running core call takes a `ProgressFn` (a callable taking one message);
`ProgressView` is that callable, so core code needs no change to be shown well:

    with ProgressView.for_stderr() as view:          # the CLI opens one per command
        replay(..., progress=view)                    # plain messages: one line each

Conventions a message may follow (runners already do): a "[label] " prefix names
the bar the message belongs to, and "K/N" right after it moves that bar (the probe's
"3/10 case.pre done"). Indented messages are tool output (pip, uv, docker build):
shown only with -v. Quiet (-q) shows nothing but what the command prints itself.

A message ending in "…" (or "...") opens a *phase* of its label (importing torch,
building an env, verifying rollbacks): on a terminal it stays on screen with its
elapsed time counting until the label's next message, then is printed once with
the seconds it took; off a terminal it is the phase's one line.

Off a TTY, under NO_COLOR or TERM=dumb, output is one plain line per step with no
control characters, so CI logs and golden files stay stable.

A path in a message is shown as a person needs it (`shorten_paths`): the home folder as
`~`, and a path elsewhere (a temporary folder, casekit's env cache) by its last three
parts, which name the env or the script; -v shows every path whole.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TextIO

from casekit.scrub import portable_paths
from casekit.terminal import inert, raw_stream

if TYPE_CHECKING:  # rich is imported only when a terminal shows bars
    from rich.progress import Progress


class Verbosity(IntEnum):
    """How much the commands say besides their result: -q, default, -v."""

    QUIET = 0
    NORMAL = 1
    VERBOSE = 2


_verbosity = Verbosity.NORMAL
_COUNT = re.compile(r"^(?:\[(?P<label>[^\]]+)\] )?(?P<done>\d+)/(?P<total>\d+)\b")
_PLAIN_LEAD = "  ... "
_PHASE_COLUMNS = 30  # a live phase's pulse and elapsed time beside its message
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


PHASE_ENDINGS = ("…", "...")


@dataclass
class Phase:
    """A step of one label still running: what it said, since when, its live line on a terminal."""

    message: str
    started: float
    task_id: Any = None


@dataclass
class ProgressView:
    """A ProgressFn that renders: bars on a TTY, one plain line per step otherwise."""

    stream: TextIO
    plain: bool = True
    level: Verbosity = Verbosity.NORMAL
    width: int | None = None  # a terminal's columns: each line is cut to fit (None: a log, kept whole)
    _bars: Progress | None = None
    _tasks: dict[str, Task] = field(default_factory=dict)
    _phases: dict[str, Phase] = field(default_factory=dict)
    _labels: list[str] = field(default_factory=list)  # every label seen: a cut label must stay told apart from them
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    @contextmanager
    def for_stderr(cls, stream: TextIO | None = None) -> Iterator[ProgressView]:
        """The view a command uses: stderr, plain or live by the rules above, the global verbosity."""
        out = stream or sys.stderr
        view = cls(out, plain=plain_output(out), level=verbosity(), width=terminal_width(out))
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

        # below the sanitiser: the bars' own control codes must pass, and every message is made inert first
        console = Console(file=raw_stream(self.stream), force_terminal=True, width=self.width)
        self._bars = Progress(
            TimeElapsedColumn(),  # first: a long description never pushes the elapsed time off the line
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[amount]}"),  # "3/10"
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._bars.start()

    def stop(self) -> None:
        with self._lock:
            for label in list(self._phases):
                self._close_phase(label)
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    def __call__(self, message: str) -> None:
        """One progress message (the ProgressFn interface)."""
        if self.level is Verbosity.QUIET:
            return
        message = inert(message)  # a script's output, a label, a path: text, never a control sequence
        if self.level < Verbosity.VERBOSE:
            message = shorten_paths(message)
        detail = message.startswith((" ", "\t")) or bool(_LABEL.match(message) and message.split("] ", 1)[1][:1] == " ")
        if detail and self.level < Verbosity.VERBOSE:
            return
        with self._lock:
            labelled = _LABEL.match(message)
            label = labelled.group("label") if labelled else ""
            if label and label not in self._labels:
                self._labels.append(label)
                self._refit_bars()
            if not detail:  # tool output belongs to the phase it is part of; anything else ends it
                self._close_phase(label)
            if not detail and message.rstrip().endswith(PHASE_ENDINGS):
                self._open_phase(label, message.rstrip())
                return
            count = _COUNT.match(message)
            if count and self._bars is not None:
                label = count.group("label") or "progress"
                task = self._tasks.get(label) or self._new_task(label, float(count.group("total")))
                task.completed, task.total = float(count.group("done")), float(count.group("total"))
                self._render(task)
                return
            self._line(message)

    def _open_phase(self, label: str, message: str) -> None:
        phase = Phase(message, time.monotonic())
        if self._bars is not None:  # a live line: the pulse and the elapsed time move while nothing else does
            from rich.markup import escape

            shown = fit_line(message, max(20, self.width - _PHASE_COLUMNS), self._labels) if self.width else message
            phase.task_id = self._bars.add_task(escape(shown), total=None, amount="")
        else:
            self._line(message)  # off a terminal: the phase's one line
        self._phases[label] = phase

    def _close_phase(self, label: str) -> None:
        phase = self._phases.pop(label, None)
        if phase is None or self._bars is None or phase.task_id is None:
            return
        self._bars.remove_task(phase.task_id)
        took = f" {time.monotonic() - phase.started:.1f} s"  # what it took stays whole, the message is cut
        self._line(
            (fit_line(phase.message, self.width - len(took), self._labels) if self.width else phase.message) + took
        )

    def _new_task(self, description: str, total: float) -> Task:
        task = Task(description, total)
        if self._bars is not None:
            task.task_id = self._bars.add_task(self._bar_name(description), total=total, amount=_counted(task))
        self._tasks[description] = task
        return task

    def _bar_name(self, label: str) -> str:
        from rich.markup import escape  # a bar's name is markup to rich: a '[' in a path is text

        # the bar, its count and its times need the rest of the line: a label gets a third of it
        return escape(fit_label(label, max(12, self.width // 3), self._labels) if self.width else label)

    def _refit_bars(self) -> None:
        """A new label on screen: each bar's name is cut again so that it stays told apart from it."""
        if self._bars is None or not self.width:
            return
        for label, task in self._tasks.items():
            if task.task_id is not None:
                self._bars.update(task.task_id, description=self._bar_name(label))

    def _render(self, task: Task) -> None:
        if self._bars is not None and task.task_id is not None:
            self._bars.update(task.task_id, completed=task.completed, total=task.total, amount=_counted(task))

    def _line(self, message: str) -> None:
        if self._bars is not None:
            line = fit_line(message, self.width, self._labels) if self.width else message
            self._bars.console.print(line, markup=False, highlight=False, no_wrap=True, overflow="ellipsis")
        else:
            shown = fit_line(message, self.width - len(_PLAIN_LEAD), self._labels) if self.width else message
            self.stream.write(f"{_PLAIN_LEAD}{shown}\n")
            self.stream.flush()


def shorten_paths(message: str, home: str | None = None) -> str:
    """`message` with each absolute path as a person needs it (`scrub.portable_paths`): under the home
    folder from `~`, elsewhere by its last three parts, not the temporary or cache folder around it."""
    return portable_paths(message, home)


def terminal_width(stream: TextIO) -> int | None:
    """The columns of the terminal `stream` writes to; None when it is not a terminal (a log keeps whole lines)."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    return max(20, shutil.get_terminal_size().columns)


def fit_line(line: str, width: int, labels: Iterable[str] = ()) -> str:
    """One line that does not wrap: a long "[label] message" loses the parts of its label that the other
    `labels` share first (its kind and what tells it apart say which target), then the end of the message."""
    if len(line) <= width:
        return line
    match = _LABEL.match(line.lstrip()) if "\n" not in line else None
    if match:
        lead = line[: len(line) - len(line.lstrip())]
        rest = match["rest"]
        room = width - len(lead) - len(rest) - 3  # "[", "] "
        label = fit_label(match["label"], max(12, room), labels)
        line = f"{lead}[{label}] {rest}"
    return line if len(line) <= width else line[: width - 1] + "\u2026"


def fit_label(label: str, room: int, others: Iterable[str] = ()) -> str:
    """A label in `room` characters that still tells it apart from the `others` on screen: its kind, then
    the parts no other label shares (`python:…/torch-2.5/…` beside `python:…/torch-2.13/…`), then as much of
    its end and its start as fits; alone, its kind and its end (`python:…/nightly/bin/python`)."""
    if len(label) <= room:
        return label
    kind, sep, rest = label.partition(":")
    head = kind + sep if sep and len(kind) + 2 < room // 2 else ""
    body = rest if head else label
    parts = body.split("/")
    start, end = _telling_parts(
        parts, [other.partition(":")[2] if head else other for other in others if other != label]
    )
    if start > 0 or end < len(parts):
        shown = _around(parts, start, end, room - len(head))
        if shown is not None:
            return head + shown
    return head + "\u2026" + body[-(room - len(head) - 1) :]


def _telling_parts(parts: list[str], others: list[str]) -> tuple[int, int]:
    """The slice of `parts` (a label split at '/') that the other labels do not share: the parts after
    the longest start and before the longest end it has in common with any of them; (0, len) when none."""
    lead = tail = 0
    for other in others:
        theirs = other.split("/")
        same = 0
        while same < min(len(parts), len(theirs)) - 1 and parts[same] == theirs[same]:
            same += 1
        lead = max(lead, same)
        same = 0
        while same < min(len(parts), len(theirs)) - 1 and parts[-1 - same] == theirs[-1 - same]:
            same += 1
        tail = max(tail, same)
    if lead + tail >= len(parts):  # no part is its own against every other: keep what differs from the nearest
        lead, tail = 0, min(tail, len(parts) - 1)
    return lead, len(parts) - tail


def _around(parts: list[str], start: int, end: int, room: int) -> str | None:
    """The parts start..end, then the parts after them and before them while they fit, '…' for the rest;
    when even the telling parts do not fit, their end (where versions and names differ most)."""

    def joined(first: int, last: int) -> str:
        return ("\u2026/" if first > 0 else "") + "/".join(parts[first:last]) + ("/\u2026" if last < len(parts) else "")

    if len(joined(start, end)) > room:
        after = "/\u2026" if end < len(parts) else ""
        keep = room - 1 - len(after)
        return "\u2026" + "/".join(parts[start:end])[-keep:] + after if keep >= 3 else None
    while end < len(parts) and len(joined(start, end + 1)) <= room:
        end += 1
    while start > 0 and len(joined(start - 1, end)) <= room:
        start -= 1
    return joined(start, end)


def _counted(task: Task) -> str:
    """How far a task is: '3/10'."""
    return f"{task.completed:g}/{task.total:g}"
