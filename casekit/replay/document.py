"""The `casekit.replay/1` document: one typed writer, one typed reader, one JSON Schema.

`replay --json` and `merge --json` write it; `merge`, `report --results` and
bisect read it. The schema ships in the package (data/replay-1.schema.json) and
its `schema` constant is the only place the document's name is spelled. Results
files are other people's data: the reader takes only regular files of bounded
size, rejects anything the schema does not describe, and reports every problem
as one line naming the file and the field.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from casekit.errors import CasekitError
from casekit.fsutil import UnreadableFile, read_regular_bytes, write_atomic
from casekit.model import Severity

if TYPE_CHECKING:  # the writer reads replay's results; importing replay at run time would pull in the runners
    from casekit.classify import CaseResult
    from casekit.replay.run import ReplayReport, TargetRun

SCHEMA_FILE = "replay-1.schema.json"
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024  # far above a 10,000-case matrix; below what would exhaust memory
MAX_DEPTH = 64  # casekit writes 8 levels; deeper is forged, and would overflow the validator or json.dumps


class ReplayDocumentError(CasekitError):
    """A results file that is not a readable, valid casekit.replay/1 document."""


class SideEntry(TypedDict):
    file: str
    line: int
    function: str
    source: str
    gb_id: str | None
    reason: str
    category: str
    call_site: str | None


# "class" is a Python keyword, so this TypedDict takes the functional form
SiteEntry = TypedDict(
    "SiteEntry", {"class": str, "observed": SideEntry | None, "recorded": SideEntry | None, "note": str}
)


class ScriptEntry(TypedDict):
    status: str
    recorded_status: str | None
    detail: str
    graphs: int
    fallback_frames: list[str]
    recompiles: int
    recompiles_recorded: int
    sites: list[SiteEntry]
    notes: list[str]


class RollbackEntry(TypedDict):
    needed: bool
    verified: bool | None
    detail: str
    notes: str
    path: str | None


class ResultEntry(TypedDict):
    case: str
    target: str
    verdict: str
    severity: str
    reasons: list[str]
    scripts: dict[str, ScriptEntry | None]
    rollback: RollbackEntry | None


class TargetEntry(TypedDict):
    label: str
    torch: NotRequired[str | None]
    cuda: NotRequired[str | None]
    python: NotRequired[str | None]
    runner: NotRequired[str | None]
    sandbox: NotRequired[str | None]  # what isolated the scripts, in one line ("bwrap: no network, ...")
    error: NotRequired[str | None]
    warnings: NotRequired[list[str]]
    seconds: NotRequired[float | None]
    import_s: NotRequired[float | None]


class Matrix(TypedDict):
    cases: list[str]
    targets: list[str]


class ReplayDocument(TypedDict):
    schema: str
    targets: list[TargetEntry]
    results: list[ResultEntry]
    shard: NotRequired[str]
    shards: NotRequired[list[str]]
    matrix: NotRequired[Matrix]
    # a shard's slice, as `replay --shard` planned it: target label -> the shards (1-based) holding its cells
    layout: NotRequired[dict[str, list[int]]]
    shard_source: NotRequired[str]  # where the shard came from: "--shard" or the scheduler's variables
    attempt: NotRequired[int]  # per-target result files: 1, then one more each time a shard rewrites its file
    written: NotRequired[str]  # when (UTC, ISO 8601): of two attempts at one shard, the later wins


@cache
def replay_schema() -> dict[str, Any]:
    """The JSON Schema of casekit.replay/1, as shipped in the package."""
    text = resources.files("casekit.data").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


REPLAY_SCHEMA: str = replay_schema()["properties"]["schema"]["const"]


# --------------------------------------------------------------------- writer


def _side(site: Any) -> SideEntry | None:
    if site is None:
        return None
    return {
        "file": site.file,
        "line": site.line,
        "function": site.function,
        "source": site.source,
        "gb_id": site.gb_id,
        "reason": site.reason,
        "category": site.category,
        "call_site": site.call_site.where() if site.call_site else None,
    }


def result_entry(result: CaseResult) -> ResultEntry:
    """One case on one target, as the document holds it."""
    scripts: dict[str, ScriptEntry | None] = {"pre": None, "post": None}
    for which, script in result.scripts.items():
        observation = script.observation
        scripts[which] = {
            "status": script.status.value,
            "recorded_status": script.recorded_status.value if script.recorded_status else None,
            "detail": observation.detail,
            "graphs": observation.graphs,
            "fallback_frames": [f"{f.function} ({f.file}:{f.line})" for f in observation.fallback_frames],
            "recompiles": len(observation.recompiles),
            "recompiles_recorded": script.recompiles_before,
            "sites": [
                {
                    "class": p.site_class.value,
                    "observed": _side(p.observed),
                    "recorded": _side(p.recorded),
                    "note": p.note,
                }
                for p in script.sites
            ],
            "notes": script.notes,
        }
    rollback = result.rollback
    return {
        "case": result.case_id,
        "target": result.target,
        "verdict": str(result.verdict),
        "severity": result.severity.value,
        "reasons": result.reasons,
        "scripts": scripts,
        "rollback": None
        if rollback is None
        else {
            "needed": rollback.needed,
            "verified": rollback.verified,
            "detail": rollback.detail,
            "notes": rollback.notes,
            "path": rollback.path,
        },
    }


def target_entry(run: TargetRun) -> TargetEntry:
    """One target's environment and timing, as the document holds it."""
    return {
        "label": run.label,
        "torch": run.environment.get("torch"),
        "cuda": run.environment.get("torch_cuda"),
        "python": run.environment.get("python"),
        "runner": run.spec.runner,
        "sandbox": run.environment.get("sandbox"),
        "error": run.error,
        "warnings": run.warnings,
        "seconds": round(run.seconds, 2),
        "import_s": run.import_s,
    }


def replay_document(
    report: ReplayReport | None, shard: str | None = None, matrix: Matrix | None = None
) -> ReplayDocument:
    """The document for a replay (None: a shard with nothing to run); shard and matrix say which slice."""
    document: ReplayDocument = {
        "schema": REPLAY_SCHEMA,
        "targets": [target_entry(run) for run in report.targets] if report else [],
        "results": [result_entry(result) for result in report.results] if report else [],
    }
    if shard is not None:
        document["shard"] = shard
    if matrix is not None:
        document["matrix"] = matrix
    return document


def write_replay_document(document: ReplayDocument, path: Path) -> Path:
    """Write atomically (parent folders created): readers see the old file or the new one."""
    try:
        write_atomic(path, json.dumps(document, indent=2) + "\n")
    except OSError as error:
        raise ReplayDocumentError(f"{path}: cannot write: {error.strerror or error}") from None
    return path


# --------------------------------------------------------------------- reader


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _read_bounded(path: Path) -> bytes:
    """The bytes of a regular file no larger than MAX_DOCUMENT_BYTES (FIFOs, devices, folders refused).

    The path is the user's own (--results, merge's arguments): a symlink to a document is followed."""
    try:
        return read_regular_bytes(path, MAX_DOCUMENT_BYTES, follow_symlinks=True)
    except FileNotFoundError:
        raise ReplayDocumentError(f"{path}: no such file") from None
    except UnreadableFile as why:
        raise ReplayDocumentError(f"{path}: {why}; expected a {REPLAY_SCHEMA} JSON file") from None


def _field(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _too_deep(data: Any) -> tuple[Any, ...] | None:
    """The path to the first value nested deeper than MAX_DEPTH, or None (a loop, not recursion)."""
    pending: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while pending:
        value, where = pending.pop()
        if len(where) > MAX_DEPTH:
            return where
        if isinstance(value, dict):
            pending += [(child, (*where, key)) for key, child in value.items()]
        elif isinstance(value, list):
            pending += [(child, (*where, index)) for index, child in enumerate(value)]
    return None


def _check_sites(document: ReplayDocument, origin: Path | str) -> None:
    """What the schema cannot say plainly: a site is observed, recorded, or both, never neither."""
    for i, result in enumerate(document["results"]):
        for which, script in result["scripts"].items():
            for j, site in enumerate(script["sites"] if script else []):
                if site["observed"] is None and site["recorded"] is None:
                    where = f"results[{i}].scripts.{which}.sites[{j}]"
                    raise ReplayDocumentError(f"{origin}: field '{where}': neither observed nor recorded")


def parse_replay_document(data: Any, origin: Path | str) -> ReplayDocument:
    """Check parsed JSON against the schema; the typed document, or one line naming the field."""
    import jsonschema  # imported on use: only the commands that read documents pay for it

    if not isinstance(data, dict) or data.get("schema") != REPLAY_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ReplayDocumentError(
            f"{origin}: field 'schema': expected {REPLAY_SCHEMA!r}, got {_short(repr(found), 60)} "
            "(is this `casekit replay --json` output?)"
        )
    deep = _too_deep(data)
    if deep is not None:
        raise ReplayDocumentError(f"{origin}: field '{_field(deep[:3])}': nested deeper than {MAX_DEPTH} levels")
    validator = jsonschema.Draft202012Validator(replay_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        where = _field(error.absolute_path) or "(document)"
        raise ReplayDocumentError(f"{origin}: field '{where}': {_short(error.message)}")
    document: ReplayDocument = data  # type: ignore[assignment]
    _check_sites(document, origin)
    return document


def read_replay_document(path: Path) -> ReplayDocument:
    """Read one casekit.replay/1 file; every problem is one ReplayDocumentError line naming the file."""
    raw = _read_bounded(path)
    try:
        text = raw.decode("utf-8")
        data = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise ReplayDocumentError(f"{path}: not UTF-8 text") from None
    except RecursionError:
        raise ReplayDocumentError(f"{path}: not valid JSON: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, NaN/Infinity, integers too long to convert
        raise ReplayDocumentError(f"{path}: not valid JSON: {_short(str(error))}") from None
    try:
        return parse_replay_document(data, path)
    except RecursionError:
        raise ReplayDocumentError(f"{path}: nested too deeply to validate") from None


def worst_severity(document: ReplayDocument) -> Severity:
    """The worst result severity in a document (info when it holds none)."""
    return max((Severity(r["severity"]) for r in document["results"]), key=lambda s: s.rank, default=Severity.INFO)


def failed_targets(document: ReplayDocument) -> list[TargetEntry]:
    """Targets whose environment never ran: the document says nothing about their cases."""
    return [target for target in document["targets"] if target.get("error")]
