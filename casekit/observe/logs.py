"""Parsing Dynamo's graph_breaks / recompiles / frame-skip messages from every release.

The shapes differ (see BRIEF "Measured here"):
- 2.3-2.5: `Graph break: from user code at:` + frames; the reason is the exception
  attached to the record (`Unsupported: Tensor.item`).
- 2.4-2.9: `Graph break: skip: from user code at:` when the whole frame is skipped.
- 2.6: `Graph break in user code at F:L` / `Reason: ...` / `User code traceback:`.
- 2.7+: `Graph Break Reason:` with a registry message (gb_type, Explanation, Hint,
  Developer debug context), ids in a link from 2.9, an "Encountered graph break
  when attempting to trace ..." prefix from 2.10.
- 2.10+: `torch.compile cannot properly resume from this graph break, which results
  in a skip.`
- Repeats: `(user stack suppressed due to duplicate graph break)` / `(details
  suppressed)` / `Unsupported break in user code at F:L (details suppressed)`.
Every parser here is pure: text in, plain data out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from casekit.model import Frame

FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+?)\s*$')
USER_CODE_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\b")
# A record's reason may open with preambles, each a line ending in ":" that announces what follows
# ("Encountered graph break when attempting to trace CALL: ...:" 2.10+, "Encountered graph break when
# formatting an f-string value:" 2.15, "Failed to handle graph break gracefully. ... Graph break
# encountered:"). They are told by their shape, not by their words: in a registry message (2.7+) the
# title is the last unindented line before "Explanation:"; every unindented line above it announces it.
SKIP_MARKERS = (
    "Graph break: skip:",
    "which results in a skip",
    "will skip tracing the frame",
    "Skipping the function and falling back to eager",  # 2.10+
)
RECOMPILING = re.compile(r"Recompiling function (?P<function>\S+) in (?P<file>.+?):(?P<line>\d+)")
WONT_CONVERT = re.compile(r"WON'T CONVERT (?P<function>\S+) (?P<file>.+?) line (?P<line>\d+)")
GUARD_ITEM = re.compile(r"^\d+/\d+: ")
GUARD_SOURCE_COMMENT = re.compile(r"\s{2,}# ")
NESTED_BREAK = "*** While handling this graph break, another graph break occurred: ***"


@dataclass
class RawBreak:
    """One graph-break event as a release printed it, before normalization."""

    frames: list[Frame]  # outermost first, raw file paths
    reason: str  # the reason text (gb_type + details, or legacy text)
    gb_type: str | None = None
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    gb_id_text: str = ""  # text in which a gb link may appear
    excerpt: str = ""
    skip: bool = False
    suppressed: bool = False  # a repeat: location only, no stack


def parse_frames(text: str) -> list[Frame]:
    """Traceback-style frames (`File "x", line N, in f` + optional source line)."""
    frames: list[Frame] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = FRAME_LINE.match(line)
        if not match:
            continue
        source = ""
        if index + 1 < len(lines):
            following = lines[index + 1]
            stripped = following.strip()
            if stripped and not FRAME_LINE.match(following) and not set(stripped) <= set("^~ "):
                if following.startswith("    ") or following.startswith("\t"):
                    source = stripped
        frames.append(Frame(match["file"], int(match["line"]), match["function"], source))
    return frames


def _registry_lines(block: str) -> list[str]:
    """The lines of one registry message: a nested break's second message (2.13+) cut off."""
    return block.split(NESTED_BREAK)[0].strip("\n").splitlines()


def _split_registry_message(block: str) -> tuple[str | None, str, list[str]]:
    """gb_type, explanation and hints of a registry-style reason block (2.7+): the title is the last
    unindented line before the first "Explanation:" line (the lines above it are preambles)."""
    lines = _registry_lines(block.lstrip(" "))
    explained = next((i for i, line in enumerate(lines) if line.strip().startswith("Explanation:")), None)
    if explained is None:  # 2.6 and legacy: a plain reason, no registry fields
        return None, "", []
    titles = [line.strip() for line in lines[:explained] if line.strip() and not line.startswith((" ", "\t"))]
    gb_type = titles[-1] if titles else None
    explanation = lines[explained].strip().removeprefix("Explanation:").strip()
    hints = [line.strip().removeprefix("Hint:").strip() for line in lines if line.strip().startswith("Hint:")]
    return gb_type, explanation, hints


def without_preamble(text: str) -> str:
    """A plain (non-registry) reason without the lines that only announce it: each leading line ending in
    ":" that has text after it."""
    lines = [line for line in text.strip().splitlines()]
    while len(lines) > 1 and lines[0].rstrip().endswith(":") and any(line.strip() for line in lines[1:]):
        lines = lines[1:]
        while lines and not lines[0].strip():
            lines = lines[1:]
    return "\n".join(lines).strip()


def is_registry_message(message: str) -> bool:
    """Whether a message is registry-style (2.7+): a title, then "Explanation:", hints, a debug context."""
    return _split_registry_message(message)[0] is not None


def error_headline(message: str) -> str:
    """What an error is, in one line: a registry-style error's title (never its hint or explanation lines),
    else its first line (with the next one when the first only announces it: "...error:")."""
    gb_type, _, _ = _split_registry_message(message)
    if gb_type:
        return gb_type
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def clean_excerpt(message: str) -> str:
    """The log text without PyTorch-internal tracebacks (they churn with every release)."""
    kept: list[str] = []
    skipping = False
    for line in message.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            skipping = True
            continue
        if skipping:
            if line.startswith(" ") or not line.strip():
                continue
            skipping = False
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def _without_internal_traceback(message: str) -> str:
    """Drop a `Traceback (most recent call last):` block: its frames are PyTorch's, not the user's."""
    if "Traceback (most recent call last):" not in message:
        return message
    return clean_excerpt(message)


def parse_graph_break(message: str, exc_type: str | None = None, exc_message: str | None = None) -> RawBreak:
    """One graph_breaks record of any release."""
    skip = any(marker in message for marker in SKIP_MARKERS)
    suppressed = "suppressed" in message and "User code traceback" not in message
    message = _without_internal_traceback(message)
    head, _, traceback_part = message.partition("User code traceback:")
    frames = parse_frames(traceback_part if traceback_part else message)
    if not frames:
        match = USER_CODE_AT.search(message)
        if match:
            frames = [Frame(match["file"], int(match["line"]), "?", "")]
    reason = ""
    for marker in ("Graph Break Reason:", "Reason:"):
        if marker in head:
            reason = head.split(marker, 1)[1].lstrip(" ")
            break
    if not reason and exc_message:
        reason = exc_message
    if not reason:
        reason = message.splitlines()[0] if message else ""
    gb_type, explanation, hints = _split_registry_message(reason)
    if gb_type is None and exc_message and "Explanation:" in exc_message:
        gb_type, explanation, hints = _split_registry_message(exc_message)
    reason_text = gb_type or without_preamble(reason.split(NESTED_BREAK)[0])
    if reason_text.startswith("Unsupported: "):
        reason_text = reason_text.removeprefix("Unsupported: ")
    excerpt = clean_excerpt(message)
    if exc_message and exc_message.strip() and exc_message.strip() not in excerpt:
        excerpt += f"\n{exc_type or 'Exception'}: {clean_excerpt(exc_message)}"
    return RawBreak(
        frames=frames,
        reason=reason_text,
        gb_type=gb_type,
        explanation=explanation,
        hints=hints,
        gb_id_text=message + "\n" + (exc_message or ""),
        excerpt=excerpt.strip(),
        skip=skip,
        suppressed=suppressed,
    )


@dataclass
class RawRecompile:
    function: str
    file: str
    line: int
    reasons: list[str]


def parse_recompile(message: str) -> RawRecompile | None:
    match = RECOMPILING.search(message)
    if not match:
        return None
    items = [line.strip()[2:].strip() for line in message.splitlines() if line.strip().startswith("- ")]
    return RawRecompile(match["function"], match["file"], int(match["line"]), guard_reasons(items))


def guard_reasons(items: list[str]) -> list[str]:
    """The failed guards of one recompile, from its items (the log's "- " lines, a trace's payload lines).

    2.2+ number each failed guard with its compile id ("0/0: ..."); 2.13 adds a user stack and a source
    comment holding the script's path, cut on the left by torch (`mp/casekit-.../repro.py:9`): keep the
    guard itself, which is what compares across runs and names no folder."""
    guards = [GUARD_SOURCE_COMMENT.split(item, maxsplit=1)[0].strip() for item in items if GUARD_ITEM.match(item)]
    return guards or [item for item in items if not item.startswith(("User stack trace", "File "))]


@dataclass
class RawFallback:
    function: str
    file: str
    line: int
    reason: str


def parse_wont_convert(message: str, exc_message: str | None) -> RawFallback | None:
    match = WONT_CONVERT.search(message)
    if not match:
        return None
    reason = (exc_message or "").strip().splitlines()
    return RawFallback(match["function"], match["file"], int(match["line"]), reason[0] if reason else "")


# Dynamo's source of an input, step by step: the frame's local or global, a module's submodule, parameter
# or buffer (what `self.fc.weight` is stored as), an attribute, an item.
_SOURCE_ROOT = re.compile(r"^[LG]\['(?P<name>[^'\]]+)'\]")
_SOURCE_MEMBER = re.compile(r"^\._(?:modules|parameters|buffers)\['(?:(?P<name>[A-Za-z_]\w*)|(?P<index>\d+))'\]")
_SOURCE_ATTRIBUTE = re.compile(r"^\.[A-Za-z_]\w*")
_SOURCE_ITEM = re.compile(r"^\[(?:-?\d+|'[^'\]]*')\]")


def source_name(source: str) -> str:
    """An input as the user's code names it, from Dynamo's guard source: `L['self']._modules['fc'].
    _parameters['weight']` is `self.fc.weight`, a ModuleList's child `self.blocks[0]`, `L['args'][0]` is
    `args[0]`; a source in another form (`___as_tensor(...)`, a call) is kept as it is."""
    root = _SOURCE_ROOT.match(source)
    if root is None:
        return source
    name, rest = root["name"], source[root.end() :]
    while rest:
        member = _SOURCE_MEMBER.match(rest)
        if member is not None:  # a Sequential's or ModuleList's child is indexed: `self.blocks[0]`
            name += f".{member['name']}" if member["name"] else f"[{member['index']}]"
            rest = rest[member.end() :]
            continue
        step = _SOURCE_ATTRIBUTE.match(rest) or _SOURCE_ITEM.match(rest)
        if step is None:
            return source  # a form this reading does not know: the source as torch wrote it
        name, rest = name + step.group(0), rest[step.end() :]
    return name
