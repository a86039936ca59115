"""The `casekit.replay/1` document: one typed writer, one typed reader, one JSON Schema.

`replay --json` and `merge --json` write it; `merge`, `report --results` and
bisect read it. The schema ships in the package (data/replay-1.schema.json) and
its `schema` constant is the only place the document's name is spelled. The reader
returns typed entries (dataclasses, enums for every verdict, severity, status,
class and script role) and every consumer reads those, never the JSON. Results
files are other people's data: the reader takes only regular files of bounded
size, rejects anything the schema does not describe, and reports every problem
as one line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from casekit.bundle import from_plain
from casekit.errors import BundleError, CasekitError
from casekit.fsutil import UnreadableFile, json_too_deep, read_regular_bytes, write_atomic
from casekit.model import (
    PerfRecord,
    ScriptRole,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
    Verdict,
    to_plain,
)
from casekit.observe.probe_output import read_environment

if TYPE_CHECKING:  # the writer reads replay's results; importing replay at run time would pull in the runners
    from casekit.classify import CaseResult
    from casekit.perf.phase import PerfResult
    from casekit.replay.run import ReplayReport, TargetRun

SCHEMA_FILE = "replay-1.schema.json"
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024  # far above a 10,000-case matrix; below what would exhaust memory
MAX_DEPTH = 64  # casekit writes 8 levels; deeper is forged, and would overflow the validator or json.dumps


class ReplayDocumentError(CasekitError):
    """A results file that is not a readable, valid casekit.replay/1 document."""


@dataclass(frozen=True)
class SideEntry:
    """One side of a site pairing (what was observed, or what was recorded), as the document holds it."""

    file: str
    line: int
    function: str
    source: str
    gb_id: str | None
    reason: str
    category: str
    call_site: str | None  # "file:line" of the script line that led here

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class SiteEntry:
    """One site's class on one script, with either side (never neither: the reader checks it)."""

    site_class: SiteClass  # "class" in the JSON
    observed: SideEntry | None
    recorded: SideEntry | None
    note: str
    axis: str = ""  # what changed it, when the replay could tell: "torch", "library X", "setting X"
    cause: str = ""  # that in words: "gone with nested_graph_breaks=True; persists with it False (...)"

    @property
    def side(self) -> SideEntry:
        """What was observed, else what was recorded."""
        side = self.observed or self.recorded
        assert side is not None
        return side


@dataclass
class ScriptEntry:
    """One script of one result."""

    status: ScriptStatus
    recorded_status: ScriptStatus | None
    detail: str
    graphs: int
    fallback_frames: list[str]
    recompiles: int
    recompiles_recorded: int
    sites: list[SiteEntry]
    notes: list[str]
    compile_s: float | None = None  # the first calls' time (compile and first run); None: not timed or not kept


@dataclass
class RollbackEntry:
    needed: bool
    verified: bool | None
    detail: str
    notes: str
    path: str | None


# One script of a result timed (replay --perf): its figures, and against the baseline; a bundle's history
# keeps the same record (replay --perf --record).
PerfEntry = PerfRecord


@dataclass
class PerfSummary:
    """The perf phase of a replay: the baseline, the host's load, how long, what to know."""

    baseline: str | None = None
    load: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class ResultEntry:
    """One case on one target."""

    case: str
    target: str
    verdict: Verdict
    severity: Severity
    reasons: list[str]
    scripts: dict[ScriptRole, ScriptEntry]  # the scripts the case has, pre first
    rollback: RollbackEntry | None
    perf: list[PerfEntry] = field(default_factory=list)


@dataclass
class TargetEntry:
    """One target's environment and timing; only the label is required of a document."""

    label: str
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    runner: str | None = None
    sandbox: str | None = None  # what isolated the scripts, in one line ("bwrap: no network, ...")
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float | None = None
    import_s: float | None = None
    display: str | None = None  # the target as this machine names it (`python:/home/me/...`); the label is the key
    # the Dynamo settings that change break shape, as this release has them: name -> {"value", "default"}
    # ("set": true for those the replay set); None: not recorded (a probe before casekit recorded them)
    dynamo: dict[str, dict[str, Any]] | None = None
    libraries: dict[str, str] = field(default_factory=dict)  # what the scripts imported: dist -> version
    # the label as asked, when the build that ran names it otherwise ('venv:torch-2.13' ran 2.13.0): the key
    # a shard plan (`matrix`, `layout`) knows the target by; None: the label
    asked: str | None = None

    @property
    def planned(self) -> str:
        """The label a shard plan knows this target by."""
        return self.asked or self.label


@dataclass
class Matrix:
    """The whole matrix a shard is a slice of."""

    cases: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)


@dataclass
class ReplayDocument:
    """A casekit.replay/1 document, typed: what the writer makes and what the reader returns."""

    targets: list[TargetEntry]
    results: list[ResultEntry]
    shard: str | None = None
    shards: list[str] | None = None
    matrix: Matrix | None = None
    # a shard's slice, as `replay --shard` planned it: target label -> the shards (1-based) holding its cells
    layout: dict[str, list[int]] | None = None
    shard_source: str | None = None  # where the shard came from: "--shard" or the scheduler's variables
    attempt: int | None = None  # per-target result files: 1, then one more each time a shard rewrites its file
    written: str | None = None  # when (UTC, ISO 8601): of two attempts at one shard, the later wins
    perf: PerfSummary | None = None  # replay --perf: the phase that timed the results' scripts

    def to_json(self) -> dict[str, Any]:
        """The document as JSON data (enums as their string values), in the order casekit writes it."""
        data: dict[str, Any] = {
            "schema": REPLAY_SCHEMA,
            "targets": [_target_json(target) for target in self.targets],
            "results": [_result_json(result) for result in self.results],
        }
        if self.shard is not None:
            data["shard"] = self.shard
        if self.shards is not None:
            data["shards"] = list(self.shards)
        if self.matrix is not None:
            data["matrix"] = dataclasses.asdict(self.matrix)
        if self.layout is not None:
            data["layout"] = {label: list(shards) for label, shards in self.layout.items()}
        for key in ("shard_source", "attempt", "written"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.perf is not None:
            data["perf"] = to_plain(self.perf)
        return data

    def worst_severity(self) -> Severity:
        """The worst result severity (info when it holds none)."""
        return max((r.severity for r in self.results), key=lambda s: s.rank, default=Severity.INFO)

    def failed_targets(self) -> list[TargetEntry]:
        """Targets whose environment never ran: the document says nothing about their cases."""
        return [target for target in self.targets if target.error]


def _target_json(target: TargetEntry) -> dict[str, Any]:
    """A target as JSON; what a probe before settings were recorded did not say is left out, not null."""
    data = dataclasses.asdict(target)
    for key in (
        "dynamo",
        "libraries",
        "display",
        "asked",
    ):  # display: the label says it all but for an interpreter path
        if not data[key]:
            del data[key]
    return data


def _side_json(side: SideEntry | None) -> dict[str, Any] | None:
    return None if side is None else dataclasses.asdict(side)


def _result_json(result: ResultEntry) -> dict[str, Any]:
    scripts: dict[str, Any] = {role.value: None for role in ScriptRole}
    for role, script in result.scripts.items():
        scripts[role.value] = {
            "status": script.status.value,
            "recorded_status": script.recorded_status.value if script.recorded_status else None,
            "detail": script.detail,
            "graphs": script.graphs,
            "fallback_frames": list(script.fallback_frames),
            "recompiles": script.recompiles,
            "recompiles_recorded": script.recompiles_recorded,
            "sites": [
                {
                    "class": site.site_class.value,
                    "observed": _side_json(site.observed),
                    "recorded": _side_json(site.recorded),
                    "note": site.note,
                    **({"axis": site.axis} if site.axis else {}),
                    **({"cause": site.cause} if site.cause else {}),
                }
                for site in script.sites
            ],
            "notes": list(script.notes),
            **({"compile_s": script.compile_s} if script.compile_s is not None else {}),
        }
    return {
        "case": result.case,
        "target": result.target,
        "verdict": result.verdict.value,
        "severity": result.severity.value,
        "reasons": list(result.reasons),
        "scripts": scripts,
        "rollback": None if result.rollback is None else dataclasses.asdict(result.rollback),
        **({"perf": [to_plain(entry) for entry in result.perf]} if result.perf else {}),
    }


@cache
def replay_schema() -> dict[str, Any]:
    """The JSON Schema of casekit.replay/1, as shipped in the package."""
    text = resources.files("casekit.data").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


REPLAY_SCHEMA: str = replay_schema()["properties"]["schema"]["const"]


# --------------------------------------------------------------------- writer


def _side(site: Site | None) -> SideEntry | None:
    if site is None:
        return None
    return SideEntry(
        file=site.file,
        line=site.line,
        function=site.function,
        source=site.source,
        gb_id=site.gb_id,
        reason=site.reason,
        category=site.category,
        call_site=site.call_site.where() if site.call_site else None,
    )


def result_entry(result: CaseResult, perf: list[PerfResult] | None = None) -> ResultEntry:
    """One case on one target, as the document holds it (`perf`: its scripts timed, replay --perf)."""
    scripts: dict[ScriptRole, ScriptEntry] = {}
    for which in ScriptRole:  # pre first, whatever order the result holds them in
        script = result.scripts.get(which)
        if script is None:
            continue
        observation = script.observation
        scripts[which] = ScriptEntry(
            status=script.status,
            recorded_status=script.recorded_status,
            detail=observation.detail,
            graphs=observation.graphs,
            fallback_frames=[f"{f.function} ({f.file}:{f.line})" for f in observation.fallback_frames],
            recompiles=len(observation.recompiles),
            recompiles_recorded=script.recompiles_before,
            sites=[
                SiteEntry(p.site_class, _side(p.observed), _side(p.recorded), p.note, p.axis, p.cause)
                for p in script.sites
            ],
            notes=list(script.notes),
            compile_s=observation.compile_s(),
        )
    rollback = result.rollback
    return ResultEntry(
        case=result.case_id,
        target=result.target,
        verdict=result.verdict,
        severity=result.severity,
        reasons=list(result.reasons),
        scripts=scripts,
        rollback=None
        if rollback is None
        else RollbackEntry(rollback.needed, rollback.verified, rollback.detail, rollback.notes, rollback.path),
        perf=[
            PerfEntry(p.script, p.figures, p.comparison, p.skipped) for p in perf or [] if p.case_id == result.case_id
        ],
    )


def target_entry(run: TargetRun) -> TargetEntry:
    """One target's environment and timing, as the document holds it."""
    environment = read_environment(run.environment)
    return TargetEntry(
        label=run.label,
        torch=environment.torch,
        cuda=environment.torch_cuda,
        python=environment.python,
        runner=run.spec.runner,
        sandbox=environment.sandbox,
        error=run.error,
        warnings=list(run.warnings),
        seconds=round(run.seconds, 2),
        import_s=run.import_s,
        display=run.display,
        dynamo=environment.dynamo_settings or None,
        libraries=run.libraries(),
        asked=run.asked or None,
    )


def replay_document(
    report: ReplayReport | None, shard: str | None = None, matrix: Matrix | None = None
) -> ReplayDocument:
    """The document for a replay (None: a shard with nothing to run); shard and matrix say which slice."""
    phase = report.perf if report else None
    return ReplayDocument(
        targets=[target_entry(run) for run in report.targets] if report else [],
        results=[result_entry(result, run.perf) for run in report.targets for result in run.results] if report else [],
        shard=shard,
        matrix=matrix,
        perf=None if phase is None else PerfSummary(phase.baseline, phase.load, round(phase.seconds, 1), phase.notes),
    )


def write_replay_document(document: ReplayDocument, path: Path) -> Path:
    """Write atomically (parent folders created): readers see the old file or the new one."""
    try:
        write_atomic(path, json.dumps(document.to_json(), indent=2) + "\n")
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
    """The path to the first value nested deeper than MAX_DEPTH, or None."""
    return json_too_deep(data, MAX_DEPTH)


def _check_sites(data: dict[str, Any], origin: Path | str) -> None:
    """What the schema cannot say plainly: a site is observed, recorded, or both, never neither."""
    for i, result in enumerate(data["results"]):
        for which, script in result["scripts"].items():
            for j, site in enumerate(script["sites"] if script else []):
                if site["observed"] is None and site["recorded"] is None:
                    where = f"results[{i}].scripts.{which}.sites[{j}]"
                    raise ReplayDocumentError(f"{origin}: field '{where}': neither observed nor recorded")


E = TypeVar("E", bound=enum.Enum)


def _member(kind: type[E], value: Any, origin: Path | str, where: str) -> E:
    """A string value as its enum member; one line naming the field for any other value.

    The schema's closed enums are the model's (a test keeps them equal), so a validated document
    never gets here with an unknown value: this is the same refusal, said by the reader itself."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(member.value) for member in kind)
        raise ReplayDocumentError(
            f"{origin}: field '{where}': {_short(repr(value), 60)} is not one of: {allowed}"
        ) from None


def _side_entry(data: dict[str, Any] | None) -> SideEntry | None:
    if data is None:
        return None
    return SideEntry(
        file=data["file"],
        line=data["line"],
        function=data["function"],
        source=data["source"],
        gb_id=data["gb_id"],
        reason=data["reason"],
        category=data["category"],
        call_site=data["call_site"],
    )


def _script_entry(data: dict[str, Any], origin: Path | str, where: str) -> ScriptEntry:
    recorded = data["recorded_status"]
    return ScriptEntry(
        status=_member(ScriptStatus, data["status"], origin, f"{where}.status"),
        recorded_status=None
        if recorded is None
        else _member(ScriptStatus, recorded, origin, f"{where}.recorded_status"),
        detail=data["detail"],
        graphs=data["graphs"],
        fallback_frames=list(data["fallback_frames"]),
        recompiles=data["recompiles"],
        recompiles_recorded=data["recompiles_recorded"],
        sites=[
            SiteEntry(
                _member(SiteClass, site["class"], origin, f"{where}.sites[{j}].class"),
                _side_entry(site["observed"]),
                _side_entry(site["recorded"]),
                site["note"],
                site.get("axis", ""),
                site.get("cause", ""),
            )
            for j, site in enumerate(data["sites"])
        ],
        notes=list(data["notes"]),
        compile_s=data.get("compile_s"),
    )


def _result_entry(data: dict[str, Any], origin: Path | str, where: str) -> ResultEntry:
    scripts: dict[ScriptRole, ScriptEntry] = {}
    for role in ScriptRole:  # pre first, whatever order the file holds them in
        script = data["scripts"].get(role.value)
        if script is not None:
            scripts[role] = _script_entry(script, origin, f"{where}.scripts.{role.value}")
    unknown = sorted(set(data["scripts"]) - {role.value for role in ScriptRole})
    if unknown:  # the schema refuses them already (additionalProperties): the same line from here
        raise ReplayDocumentError(f"{origin}: field '{where}.scripts.{unknown[0]}': not a script (pre or post)")
    rollback = data["rollback"]
    perf = [
        _typed_plain(PerfEntry, entry, origin, f"{where}.perf[{i}]") for i, entry in enumerate(data.get("perf") or [])
    ]
    return ResultEntry(
        perf=perf,
        case=data["case"],
        target=data["target"],
        verdict=_member(Verdict, data["verdict"], origin, f"{where}.verdict"),
        severity=_member(Severity, data["severity"], origin, f"{where}.severity"),
        reasons=list(data["reasons"]),
        scripts=scripts,
        rollback=None
        if rollback is None
        else RollbackEntry(
            rollback["needed"], rollback["verified"], rollback["detail"], rollback["notes"], rollback["path"]
        ),
    )


T = TypeVar("T")


def _typed_plain(kind: type[T], data: Any, origin: Path | str, where: str) -> T:
    """A dataclass of the model from the document's data (the bundle's reader: every field's type checked)."""
    try:
        found: T = from_plain(kind, data, origin, where)
    except BundleError as error:
        raise ReplayDocumentError(str(error)) from None
    return found


def _target_entry(data: dict[str, Any]) -> TargetEntry:
    return TargetEntry(
        label=data["label"],
        torch=data.get("torch"),
        cuda=data.get("cuda"),
        python=data.get("python"),
        runner=data.get("runner"),
        sandbox=data.get("sandbox"),
        error=data.get("error"),
        warnings=list(data.get("warnings") or []),
        seconds=data.get("seconds"),
        import_s=data.get("import_s"),
        display=data.get("display"),
        dynamo=data.get("dynamo"),
        libraries=dict(data.get("libraries") or {}),
        asked=data.get("asked"),
    )


def _typed(data: dict[str, Any], origin: Path | str) -> ReplayDocument:
    """Validated JSON data as the typed document (every enum value turned into its member)."""
    matrix = data.get("matrix")
    return ReplayDocument(
        targets=[_target_entry(target) for target in data["targets"]],
        results=[_result_entry(result, origin, f"results[{i}]") for i, result in enumerate(data["results"])],
        shard=data.get("shard"),
        shards=list(data["shards"]) if "shards" in data else None,
        matrix=None
        if matrix is None
        else Matrix(cases=list(matrix.get("cases") or []), targets=list(matrix.get("targets") or [])),
        layout={str(k): list(v) for k, v in data["layout"].items()} if "layout" in data else None,
        shard_source=data.get("shard_source"),
        attempt=data.get("attempt"),
        written=data.get("written"),
        perf=_typed_plain(PerfSummary, data["perf"], origin, "perf") if "perf" in data else None,
    )


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
    _check_sites(data, origin)
    return _typed(data, origin)


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
