"""What reaches the terminal: text only, never a control sequence from someone else's text.

A bundle's title, a script's output, a break reason, a file name are other people's text, and
casekit prints them (`list`, `show`, replay's table and reasons, progress, errors). A terminal
obeys what such text may hold: OSC 52 writes the clipboard, OSC 8 makes a link whose target is
not what it shows, CSI sequences move the cursor and rewrite lines already printed, a carriage
return overprints a line, bidi overrides reorder what is read. `inert` removes every one of them;
`TerminalStream` applies it to each write, and `install` puts it around stdout and stderr at the
CLI's entry, so every writer (typer.echo, sys.stdout.write, the plain progress lines, error lines)
goes through it. The one writer with control codes of its own, rich's progress bars, writes below
it (`raw_stream`) and is handed only text that `inert` has cleaned (`casekit.progress`).
"""

from __future__ import annotations

import io
import re
import sys
from typing import TextIO

# Strings a terminal reads up to a terminator (ST: ESC \ or 0x9c; BEL ends an OSC in practice): OSC
# (ESC ] / 0x9d), DCS (ESC P / 0x90), SOS (ESC X / 0x98), PM (ESC ^ / 0x9e), APC (ESC _ / 0x9f).
# Removed whole, payload included; an unterminated one loses its introducer below and is plain text.
_STRING = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
_CSI = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # parameters, intermediates, final byte
_ESCAPE = r"\x1b[\x20-\x2f]*[\x30-\x7e]"  # every other escape sequence: ESC, intermediates, final byte
_SEQUENCE = re.compile(f"{_STRING}|{_CSI}|{_ESCAPE}")
# What is left of a control: C0 but tab and newline, DEL, C1 (0x80-0x9f, the 8-bit CSI and OSC among
# them), and the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """`text` with every control sequence and control character removed; tabs and newlines stay (a
    single-line field folds them itself: `one_line`)."""
    if text.isprintable():  # the common case, and a sure one: every control is unprintable
        return text
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


def one_line(text: str) -> str:
    """`inert` text on one line (a table cell, a listed title): each newline or tab a space."""
    return inert(text).replace("\n", " ").replace("\t", " ")


class TerminalStream(io.TextIOBase):
    """A text stream that makes every write `inert` before the stream below it sees it.

    It has no `buffer`: a writer that looked for one (click does, for an ASCII terminal) would write
    around the sanitiser; without one, it writes text here."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # bytes: refused, as a text stream does (click probes with b"")
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.raw.write(inert(text))
        return len(text)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)


def install() -> None:
    """Put a TerminalStream around sys.stdout and sys.stderr (once): what casekit prints from here on is inert."""
    if not isinstance(sys.stdout, TerminalStream):
        sys.stdout = TerminalStream(sys.stdout)
    if not isinstance(sys.stderr, TerminalStream):
        sys.stderr = TerminalStream(sys.stderr)


def raw_stream(stream: TextIO) -> TextIO:
    """The stream below a TerminalStream, for a renderer whose own control codes must pass (rich's bars);
    whatever it renders must be `inert` already."""
    return stream.raw if isinstance(stream, TerminalStream) else stream
