"""Import what a real run already wrote: TORCH_TRACE folders and TORCH_LOGS output become draft cases.

A team finds graph breaks in production long before anyone writes a minimal
repro. `import` reads the structured trace (`dedicated_log_torch_trace_*.log`:
one JSON envelope per line, payload lines indented by a tab) or the text log of
`TORCH_LOGS=graph_breaks,recompiles` (glog-prefixed `[__graph_breaks]` and
`[__recompiles]` records, any release), and files one draft per distinct place
in the user's code where breaks happen. Sites are de-duplicated by file:line +
category; breaks inside libraries belong to the user line that called into
them. Messages go through the same parsers and reason normalization as capture,
so a draft's sites are the ones capture would record for the same code.

A draft holds a placeholder script that raises NotImplementedError, the tag
`draft`, and notes saying what still needs a repro.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.archive.store import Archive
from casekit.bundle import check_case_id, sha256_text, slugify
from casekit.classify import same_break
from casekit.errors import CasekitError
from casekit.fsutil import NestedTooDeep, UnreadableFile, gunzip_bounded, loads_bounded, read_regular_bytes
from casekit.model import (
    DRAFT_TAG,
    Case,
    Recompile,
    ScriptObservation,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Site,
    SiteKind,
)
from casekit.observe.interpret import SHORT_DTYPE, SITE_PACKAGES, STDLIB, site_from_raw
from casekit.observe.logs import (
    RawBreak,
    guard_reasons,
    parse_graph_break,
    parse_recompile,
    parse_wont_convert,
    source_name,
)
from casekit.observe.reasons import describe_category, normalize_function
from casekit.scrub import Replacement, Scrubber, machine_folders

PLACEHOLDER_NAME = "draft_repro.py"
TRACE_GLOB = ("dedicated_log_torch_trace_*.log", "dedicated_log_torch_trace_*.log.gz")
LOG_TAG = re.compile(r"\[__(?P<tag>graph_breaks|recompiles|recompiles_verbose)\] ?")
RECORD_START = re.compile(r"^(Graph break\b|Unsupported break in user code|Recompiling function\b)")
TRACEBACK = "Traceback (most recent call last):"
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*): ?(?P<message>.*)$")
HARNESS = ("<frozen runpy>", "/runpy.py")
MAX_LOG_BYTES = 256 << 20  # a trace or log file, as read and as decompressed: runs write tens of MB
MAX_RECORD_DEPTH = 32  # a trace record's JSON nests a few levels; 100,000 would overflow the parser
GROUPS = ("line", "site", "function")


class DraftImportError(CasekitError):
    """An input to `casekit import` that cannot be read."""


# ---------------------------------------------------------------- reading


@dataclass
class Event:
    """One graph break, recompile or fallback read from a log or a trace, before naming."""

    kind: str  # "break" | "recompile" | "fallback"
    source: str  # "log" | "trace"
    raw_break: RawBreak | None = None
    function: str = ""
    file: str = ""
    line: int = 0
    reasons: list[str] = field(default_factory=list)


@dataclass
class TraceFacts:
    """What a structured trace says beyond breaks: versions, inputs per frame, compile times."""

    torch: str | None = None
    torch_git: str | None = None
    python: str | None = None
    inputs: dict[str, list[str]] = field(default_factory=dict)  # function -> "x: f32[4, 8] cpu"
    compile_s: dict[str, float] = field(default_factory=dict)  # function -> seconds summed over its compiles
    graphs: dict[str, int] = field(default_factory=dict)  # function -> graphs compiled
    break_records: int = 0  # dynamo_graph_break_reason artifacts (written from 2.6 on)
    restart_reasons: list[str] = field(default_factory=list)  # "function: reason" from compilation_metrics


def read_text(path: Path, follow_symlinks: bool = True) -> str:
    """A log or trace file, gzipped or not (logs are often gzipped to attach them to issues), read as
    untrusted input: a regular file (never a FIFO or a device), through a link only when the user named
    it, at most MAX_LOG_BYTES as read and as decompressed. One DraftImportError line for anything else."""
    try:
        raw = read_regular_bytes(path, MAX_LOG_BYTES, follow_symlinks=follow_symlinks)
        if path.name.endswith(".gz"):
            raw = gunzip_bounded(raw, MAX_LOG_BYTES)
    except FileNotFoundError:
        raise DraftImportError(f"{path}: no such file") from None
    except UnreadableFile as why:
        raise DraftImportError(f"{path}: {why}") from None
    return raw.decode("utf-8", errors="replace")


def split_exception(message: str) -> tuple[str, str | None, str | None]:
    """(message before the traceback, exception type, exception message) of a record with a traceback.

    Releases before 2.6 put the reason only in the exception (`torch._dynamo.exc.Unsupported: Tensor.item`).
    """
    head, sep, tail = message.partition(TRACEBACK)
    if not sep:
        return message, None, None
    exception_lines = [line for line in tail.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    if not exception_lines:
        return head, None, None
    match = EXCEPTION_LINE.match(exception_lines[0])
    if not match:
        return head, None, None
    rest = "\n".join([match["message"], *exception_lines[1:]]).strip()
    return head, match["type"].rsplit(".", 1)[-1], rest


def log_records(text: str) -> list[tuple[str, str]]:
    """(tag, message) records of a TORCH_LOGS text log; glog prefixes and compile ids stripped.

    Lines of one record share the same prefix (timestamp, thread, logger line, [frame/compile id]).
    Untagged `WON'T CONVERT` lines (a function left to eager) come back as tag 'convert_frame'.
    """
    records: list[tuple[str, str]] = []
    current_key: tuple[str, str] | None = None
    lines: list[str] = []

    def flush() -> None:
        if current_key is not None and lines:
            records.append((current_key[1], "\n".join(lines)))

    for raw in text.splitlines():
        match = LOG_TAG.search(raw)
        if not match:
            if "WON'T CONVERT" in raw:
                flush()
                current_key, lines = None, []
                records.append(("convert_frame", raw[raw.index("WON'T CONVERT") :]))
            continue
        head, tag, body = raw[: match.start()], match["tag"], raw[match.end() :]
        key = (head, tag)
        if key != current_key or (RECORD_START.match(body) and lines):
            flush()
            current_key, lines = key, []
        lines.append(body)
    flush()
    return records


def events_from_log(text: str) -> list[Event]:
    events: list[Event] = []
    for tag, message in log_records(text):
        if tag == "graph_breaks":
            head, exc_type, exc_message = split_exception(message)
            events.append(Event("break", "log", raw_break=parse_graph_break(head, exc_type, exc_message)))
        elif tag in ("recompiles", "recompiles_verbose"):
            recompile = parse_recompile(message)
            if recompile:
                events.append(
                    Event(
                        "recompile",
                        "log",
                        function=recompile.function,
                        file=recompile.file,
                        line=recompile.line,
                        reasons=recompile.reasons,
                    )
                )
        elif tag == "convert_frame":
            fallback = parse_wont_convert(message, None)
            if fallback:
                events.append(
                    Event(
                        "fallback",
                        "log",
                        function=fallback.function,
                        file=fallback.file,
                        line=fallback.line,
                        reasons=[fallback.reason],
                    )
                )
    return events


def trace_envelopes(text: str) -> Iterable[tuple[dict[str, Any], str]]:
    """(metadata, payload) per structured-trace record."""
    metadata: dict[str, Any] | None = None
    payload: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("\t"):
            payload.append(line[1:])
            continue
        if metadata is not None:
            yield metadata, "\n".join(payload)
        metadata, payload = None, []
        start = line.find("] {")
        if start < 0:
            continue
        value = _record(line[start + 2 :], f"line {number}")
        metadata = value if isinstance(value, dict) else None
    if metadata is not None:
        yield metadata, "\n".join(payload)


def _record(text: str, where: str) -> Any:
    """One record's JSON; None when it is not JSON (a line cut short); too deep is hostile: one line."""
    try:
        return loads_bounded(text, MAX_RECORD_DEPTH)
    except NestedTooDeep as error:
        raise DraftImportError(f"{where}: a trace record {error}") from None
    except ValueError:
        return None


def _mapping(value: Any) -> dict[str, Any]:
    """A record's field that should hold an object; {} when a forged record holds anything else."""
    return value if isinstance(value, dict) else {}


def _key(value: Any) -> Any:
    """A record's id as a dict key: a number or a text as it is, anything else by its JSON text."""
    return value if value is None or isinstance(value, (int, float, str)) else repr(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tensor_text(tensor: dict[str, Any]) -> str:
    dtype = str(tensor.get("dtype", "?")).removeprefix("torch.")
    device = str(tensor.get("device", "?"))
    match = re.match(r"device\(type='([^']+)'(?:, index=(\d+))?\)", device)
    if match:
        device = match.group(1) + (f":{match.group(2)}" if match.group(2) else "")
    return f"{SHORT_DTYPE.get(dtype, dtype)}{tensor.get('size', '?')} {device}"


def _read_metrics(
    metrics: dict[str, Any],
    facts: TraceFacts,
    frames: dict[str, tuple[str, str, int]],
    inputs: dict[tuple[Any, Any], list[str]],
) -> None:
    """One compilation_metrics record: its frame, versions, compile time, graphs, restarts, inputs."""
    function = normalize_function(str(metrics.get("co_name") or "?"))
    first_line = metrics.get("co_firstlineno")
    frames[str(metrics.get("compile_id"))] = (
        function,
        str(metrics.get("co_filename") or "?"),
        first_line if isinstance(first_line, int) and not isinstance(first_line, bool) else 0,
    )
    facts.torch = facts.torch or _text(metrics.get("pytorch_version"))
    if metrics.get("python_version") and not facts.python:
        facts.python = (str(metrics["python_version"]).split() or ["?"])[0]
    seconds = metrics.get("entire_frame_compile_time_s")
    if isinstance(seconds, (int, float)):
        facts.compile_s[function] = facts.compile_s.get(function, 0.0) + float(seconds)
    if metrics.get("graph_op_count"):
        facts.graphs[function] = facts.graphs.get(function, 0) + 1
    restarts = metrics.get("restart_reasons")
    for reason in restarts if isinstance(restarts, list) else []:
        entry = f"{function}: {(str(reason).splitlines() or [''])[0][:120]}"
        if entry not in facts.restart_reasons:
            facts.restart_reasons.append(entry)
    for key, seen in inputs.items():
        if f"{key[0]}/{key[1]}" == str(metrics.get("compile_id")):
            known = facts.inputs.setdefault(function, [])
            for text_of_input in seen:
                if text_of_input not in known:
                    known.append(text_of_input)


def events_from_trace(text: str, facts: TraceFacts) -> list[Event]:
    """Breaks (dynamo_graph_break_reason), recompiles (recompile_reasons), and facts from one trace file."""
    events: list[Event] = []
    frames: dict[str, tuple[str, str, int]] = {}  # compile id -> (function, file, first line)
    tensors: dict[tuple[Any, Any], dict[Any, str]] = {}  # (frame, compile) -> tensor id -> text
    inputs: dict[tuple[Any, Any], list[str]] = {}
    pending_recompiles: list[tuple[str, str]] = []
    for metadata, payload in trace_envelopes(text):
        frame_key = (_key(metadata.get("frame_id")), _key(metadata.get("frame_compile_id")))
        artifact = _mapping(metadata.get("artifact")).get("name")
        if artifact == "dynamo_graph_break_reason" and payload:
            head, exc_type, exc_message = split_exception(payload)
            events.append(Event("break", "trace", raw_break=parse_graph_break(head, exc_type, exc_message)))
            facts.break_records += 1
        elif artifact == "recompile_reasons" and payload:
            pending_recompiles.append((f"{frame_key[0]}/{frame_key[1]}", payload))
        elif artifact == "torch_version" and payload:
            version = _mapping(_record(payload, "the torch_version record"))
            facts.torch = facts.torch or _text(version.get("pytorch_version"))
            facts.torch_git = facts.torch_git or _text(version.get("commit"))
        elif "describe_tensor" in metadata:
            tensor = _mapping(metadata["describe_tensor"])
            tensors.setdefault(frame_key, {})[_key(tensor.get("id"))] = _tensor_text(tensor)
        elif "describe_source" in metadata:
            source = _mapping(metadata["describe_source"])
            text_of = tensors.get(frame_key, {}).get(_key(source.get("id")))
            name = source_name(str(source.get("source", "?")))
            if text_of:
                inputs.setdefault(frame_key, []).append(f"{name}: {text_of}")
        elif "compilation_metrics" in metadata:
            _read_metrics(_mapping(metadata["compilation_metrics"]), facts, frames, inputs)
    for compile_id, payload in pending_recompiles:
        function, file, line = frames.get(compile_id, ("?", "?", 0))
        items = [line_.strip() for line_ in payload.splitlines() if line_.strip() and not line_.startswith(" ")]
        reasons = guard_reasons([item for item in items if item != "User stack trace:"])
        events.append(Event("recompile", "trace", function=function, file=file, line=line, reasons=reasons))
    return events


def trace_files(folder: Path) -> list[Path]:
    """The trace files of a TORCH_TRACE folder; the path itself when it is not a folder (the reader
    then says what it is, a FIFO or a device included)."""
    if not folder.is_dir():
        if os.path.lexists(folder):
            return [folder]
        raise DraftImportError(f"{folder}: no such folder (expected a TORCH_TRACE directory)")
    files = sorted({p for pattern in TRACE_GLOB for p in folder.glob(pattern)})
    if not files:
        raise DraftImportError(
            f"{folder}: no dedicated_log_torch_trace_*.log files (is this the folder TORCH_TRACE pointed at?)"
        )
    return files


# ---------------------------------------------------------------- naming


class ImportNamer:
    """Names files as bundles do: libraries relative to their package root, the user's files
    relative to the folder that holds them all (no machine-specific absolute paths)."""

    def __init__(self, files: Iterable[str]) -> None:
        user_dirs = [os.path.dirname(f) for f in files if self.is_user(f) and os.path.isabs(f)]
        self.root = os.path.commonpath(user_dirs) if user_dirs else ""

    @staticmethod
    def is_harness(file: str) -> bool:
        return file.endswith(HARNESS)

    @staticmethod
    def is_user(file: str) -> bool:
        return not (
            SITE_PACKAGES.search(file) or STDLIB.search(file) or file.startswith("<") or ImportNamer.is_harness(file)
        )

    def name(self, file: str) -> str:
        if self.is_user(file):
            if self.root and file.startswith(self.root + os.sep):
                return file[len(self.root) + 1 :]
            return file if not os.path.isabs(file) else os.path.basename(file)
        for pattern in (SITE_PACKAGES, STDLIB):
            match = pattern.search(file)
            if match:
                return match["rel"]
        return file.rsplit("/", 1)[-1]


def merge_sites(events: list[Event], namer: ImportNamer) -> list[Site]:
    """Distinct sites by file:line + category; repeats counted, sources combined."""
    sites: dict[tuple[str, int, str], Site] = {}
    for event in events:
        if event.kind != "break" or event.raw_break is None:
            continue
        site = site_from_raw(event.raw_break, namer, event.source)
        if site is None:
            continue
        key = (site.file, site.line, site.category)
        known = sites.get(key)
        if known is None:
            sites[key] = site
            continue
        if event.source == "log":
            known.count += 1
        if event.source not in known.sources:
            known.sources.append(event.source)
        if known.function == "?" and site.function != "?":  # a suppressed repeat came first
            known.function, known.source, known.stack, known.call_site = (
                site.function,
                site.source,
                site.stack,
                site.call_site,
            )
        if site.kind is SiteKind.SKIP:
            known.kind = SiteKind.SKIP
    return list(sites.values())


# ---------------------------------------------------------------- drafts


@dataclass
class ImportResult:
    """Drafts to file, and what was left out (already archived)."""

    drafts: list[Case]
    skipped: list[str] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _group_key(site: Site, group: str) -> tuple[str, str]:
    anchor = site.anchor
    if group == "site":
        return (site.where(), site.category)
    if group == "function":
        return (anchor.file, anchor.function)
    return (anchor.where(), "")


def _comment(text: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in text.replace("\r", "").splitlines())


def placeholder_script(case_id: str, origin: str, sites: list[Site], recompiles: list[Recompile]) -> str:
    """The draft's pre-fix script: says what to reproduce, raises until someone writes the repro."""
    wanted = [f"  {s.where()} in {s.function}: {s.reason} ({s.gb_id or s.category})" for s in sites]
    wanted += [f"  {r.file}:{r.line} {r.function} recompiles: {'; '.join(r.reasons)[:160]}" for r in recompiles]
    header = (
        f"Draft case {case_id}, imported from {origin}; no repro yet.\n\n"
        "To reproduce:\n" + "\n".join(wanted) + "\n\n"
        "Replace this file with a minimal script that triggers them, then run:\n"
        f"  casekit capture repro.py --id {case_id} --force"
    )
    return _comment(header) + '\n\nraise NotImplementedError("draft: needs a minimal repro")\n'


def draft_notes(origin: str, sites: list[Site], recompiles: list[Recompile], facts: TraceFacts, function: str) -> str:
    seen = sum(s.count for s in sites)
    lines = [
        f"Draft imported from {origin}: {len(sites)} distinct graph break site(s) seen {seen} time(s), {len(recompiles)} recompile(s)."
    ]
    if facts.inputs.get(function):
        lines.append("Inputs the compiler saw for " + function + ": " + ", ".join(facts.inputs[function][:12]))
    if function in facts.compile_s:
        lines.append(
            f"Compile time of {function} in that run: {facts.compile_s[function]:.2f} s over {facts.graphs.get(function, 0)} graph(s)."
        )
    lines += [
        "",
        "Still needed (a draft cannot be replayed yet):",
        f"- scripts.pre: a minimal repro script (the placeholder {PLACEHOLDER_NAME} raises NotImplementedError);",
        "- then `casekit capture REPRO.py --id ID --force` records the inputs, eager baseline, output check, timings and the fullgraph=True run;",
        "- a fixed script (--fixed), --fix-summary and --rollback notes once the break is triaged.",
    ]
    return "\n".join(lines)


def _unique_id(base: str, taken: set[str]) -> str:
    candidate = check_case_id(base[:80].strip("-") or "draft")
    n = 2
    while candidate in taken:
        candidate = check_case_id(f"{base[:74].strip('-')}-{n}")
        n += 1
    taken.add(candidate)
    return candidate


def build_drafts(
    events: list[Event],
    origin: str,
    facts: TraceFacts | None = None,
    existing: list[Case] | None = None,
    group: str = "line",
    now: dt.datetime | None = None,
) -> ImportResult:
    """Events -> draft cases (pure): one per distinct user line (or site, or function) with breaks,
    plus one per function that only recompiles."""
    if group not in GROUPS:
        raise DraftImportError(f"--group must be one of {', '.join(GROUPS)}, not {group!r}")
    facts = facts or TraceFacts()
    files = [f.file for e in events if e.raw_break for f in e.raw_break.frames] + [e.file for e in events if e.file]
    namer = ImportNamer(files)
    # The log's excerpts name the user's folder and this machine's interpreter, whole or cut on the left by
    # torch: a bundle holds neither. Scrubbed before the drafts are written from them (their placeholder
    # script, title and notes quote them too).
    user_folder = [Replacement(namer.root, "")] if namer.root else []
    scrubber = Scrubber(machine_folders(user_folder))
    sites: list[Site] = scrubber.walk(merge_sites(events, namer))
    # The log and the trace of one run report the same recompiles: take one source, the log when given.
    recompile_source = "log" if any(e.kind == "recompile" and e.source == "log" for e in events) else "trace"
    recompiles = [
        Recompile(normalize_function(e.function), namer.name(e.file), e.line, scrubber.walk(e.reasons))
        for e in events
        if e.kind == "recompile" and e.source == recompile_source
    ]
    user_files = {namer.name(e.file) for e in events if e.kind == "recompile" and namer.is_user(e.file)}
    existing = existing or []
    # "Already archived" uses replay's identity (same place, or the same script line traced deeper), not a string key.
    archived = [(s, case.id) for case in existing for obs in case.observations.values() for s in obs.sites]
    taken = {case.id for case in existing}
    result = ImportResult(drafts=[], sites=sites, recompiles=recompiles)
    groups: dict[tuple[str, str], list[Site]] = {}
    for site in sites:
        owner = next((case_id for recorded, case_id in archived if same_break(recorded, site)), None)
        if owner is not None:
            result.skipped.append(f"{site.where()} ({site.gb_id or site.category}): already archived as {owner}")
            continue
        groups.setdefault(_group_key(site, group), []).append(site)
    created = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0).isoformat()
    environment = {
        k: v
        for k, v in {
            "torch": facts.torch,
            "torch_git": facts.torch_git,
            "python": facts.python,
            "runner": "import",
        }.items()
        if v
    }
    # Recompiles of a function with breaks belong to the breaks' drafts (or their archived cases).
    covered: set[tuple[str, str]] = {(s.anchor.file, s.anchor.function) for s in sites}
    archived_recompiles = {
        (r.file, r.function): case.id for case in existing for obs in case.observations.values() for r in obs.recompiles
    }
    for members in groups.values():
        first = members[0]
        anchor = first.anchor
        mine = [r for r in recompiles if r.file == anchor.file and r.function == anchor.function]
        category = first.gb_id or first.category
        case_id = _unique_id(slugify(f"{anchor.file.rsplit('.', 1)[0]}-{anchor.line}-{category}"), taken)
        reason = first.reason or describe_category(first.category)
        title = f"{reason} at {anchor.where()} ({anchor.function})" + (
            f" and {len(members) - 1} more below it" if len(members) > 1 else ""
        )
        result.drafts.append(
            _draft(case_id, title, origin, members, mine, facts, anchor.function, created, environment)
        )
    for recompile in recompiles:
        function_key = (recompile.file, recompile.function)
        if function_key in covered or recompile.file not in user_files:  # a library recompiling is not the user's case
            continue
        covered.add(function_key)
        if function_key in archived_recompiles:
            result.skipped.append(
                f"{recompile.function} recompiles ({recompile.file}): already archived as {archived_recompiles[function_key]}"
            )
            continue
        mine = [r for r in recompiles if (r.file, r.function) == function_key]
        case_id = _unique_id(slugify(f"{recompile.file.rsplit('.', 1)[0]}-{recompile.function}-recompiles"), taken)
        title = f"{recompile.function} recompiles {len(mine)} time(s) ({recompile.file}:{recompile.line})"
        result.drafts.append(
            _draft(
                case_id, title, origin, [], mine, facts, recompile.function, created, environment, tags=["recompiles"]
            )
        )
    for event in events:
        if event.kind == "fallback":
            result.warnings.append(
                f"{event.function} ({namer.name(event.file)}:{event.line}) fell back to eager entirely: {' '.join(event.reasons)}"
            )
    for draft in result.drafts:
        draft.observations = {which: scrubber.walk(obs) for which, obs in draft.observations.items()}
    return result


def _draft(
    case_id: str,
    title: str,
    origin: str,
    sites: list[Site],
    recompiles: list[Recompile],
    facts: TraceFacts,
    function: str,
    created: str,
    environment: dict[str, Any],
    tags: list[str] | None = None,
) -> Case:
    source = placeholder_script(case_id, origin, sites, recompiles)
    observation = ScriptObservation(
        status=ScriptStatus.OK,
        detail=f"imported from {origin}; not observed by casekit yet (draft)",
        graphs=facts.graphs.get(function, 0),
        sites=sites,
        recompiles=recompiles,
        log_excerpt="\n\n".join(s.excerpt for s in sites if s.excerpt)[:12000],
    )
    return Case(
        id=case_id,
        title=title[:200],
        pre=ScriptSource(PLACEHOLDER_NAME, sha256_text(source), source),
        tags=[DRAFT_TAG, *(tags or [])],
        notes=draft_notes(origin, sites, recompiles, facts, function),
        created=created,
        environment=dict(environment),
        observations={ScriptRole.PRE: observation},
    )


def import_runs(
    trace: Path | None,
    logs: list[Path],
    existing: list[Case] | None = None,
    group: str = "line",
    now: dt.datetime | None = None,
) -> ImportResult:
    """Read a TORCH_TRACE folder and/or TORCH_LOGS files and build the drafts."""
    if trace is None and not logs:
        raise DraftImportError(
            "give --trace DIR (a TORCH_TRACE folder) or --log FILE (TORCH_LOGS=graph_breaks,recompiles output)"
        )
    events: list[Event] = []
    facts = TraceFacts()
    origins = []
    warnings = []
    if trace is not None:
        for path in trace_files(trace):
            # a link the user named is followed; one inside the folder the run wrote is not
            text = read_text(path, follow_symlinks=path == trace)
            try:
                events += events_from_trace(text, facts)
            except DraftImportError as error:
                raise DraftImportError(f"{path}: {error}") from None
        origins.append(f"TORCH_TRACE {Path(trace).name}")  # a name, not a path of this machine
        if facts.break_records == 0 and facts.restart_reasons:
            # Before 2.6 the trace has no break records, only reasons without a place.
            warnings.append(
                f"this trace (torch {facts.torch or '?'}) has no dynamo_graph_break_reason records (PyTorch writes them from 2.6 on); "
                "the compiler restarted for: "
                + "; ".join(facts.restart_reasons[:8])
                + ". Import the TORCH_LOGS=graph_breaks,recompiles output of the same run to get their places."
            )
    for log in logs:
        found = events_from_log(read_text(log))
        if not found:
            raise DraftImportError(
                f"{log}: no [__graph_breaks] or [__recompiles] records (was it written with TORCH_LOGS=graph_breaks,recompiles?)"
            )
        events += found
        origins.append(f"TORCH_LOGS {Path(log).name}")
    if not events:
        raise DraftImportError(
            f"{trace}: no graph break or recompile in this trace" + (f" ({warnings[0]})" if warnings else "")
        )
    result = build_drafts(events, " + ".join(origins), facts, existing, group, now)
    result.warnings = warnings + result.warnings
    return result


def save_drafts(archive: Archive, result: ImportResult) -> list[Path]:
    """File the drafts (never over an existing case), atomically, under the archive lock."""
    paths = []
    with archive.locked():
        for case in result.drafts:
            if archive.exists(case.id):
                raise CasekitError(f"case {case.id!r} already exists in {archive.root}")
            paths.append(archive.save(case))
    return paths
