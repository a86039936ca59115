"""A derived index of the archive: per bundle (size, mtime_ns, sha256) -> the digest list/report/shard need.

Never the source of truth: the bundles are. The index lives in the archive's own
`.casekit/` folder (with a `.gitignore` of `*`, so it never shows up in the user's
repository), next to the bundles it describes: it moves, is copied and is deleted
with them, and needs no key for "which archive". An archive we cannot write to
simply goes without (every bundle is parsed, as before). The folder comes with a
shared archive, so it is untrusted (`casekit.archive.cache`): the index is sealed
with this user's key, and one without a valid seal is not casekit's: it is rebuilt.

Freshness follows git's index: a bundle whose size and mtime_ns match its entry is
trusted without reading it, unless its mtime is so close to the moment the entry
was checked that a same-tick rewrite could hide (then it is re-hashed: same bytes,
same digest). A changed bundle is re-parsed, a new one added, a deleted one dropped.
A missing, corrupt, unsealed, oversized or older-format index, or one whose
fields have the wrong types, is rebuilt silently. Writes are atomic
(temp file + rename), so concurrent writers never corrupt it; the last one wins.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.archive.cache import TAG_CHARS, Seal, cache_folder
from casekit.bundle import MAX_BUNDLE_BYTES, from_plain, load_case, parse_case
from casekit.errors import BundleError
from casekit.fsutil import UnreadableFile, read_regular_bytes, read_regular_file, write_atomic
from casekit.model import (
    Case,
    PerfRecord,
    ReplayRecord,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Severity,
    SiteClass,
    SiteVerdict,
    Verdict,
    to_plain,
)
from casekit.timeouts import recorded_run_seconds

INDEX_FILE = "index.json"
FORMAT = 3  # 2: replay records keep their fallbacks; 3: and their perf figures
# About 1 KB an entry: far above a 10,000-case archive, below what would exhaust memory.
MAX_INDEX_BYTES = 256 * 1024 * 1024
# The file is the JSON document with its seal as the first key: {"tag":"<hex>", then the sealed rest.
TAG_HEAD = b'{"tag":"'
SEALED_FROM = len(TAG_HEAD) + TAG_CHARS
IGNORE_ALL = "# casekit's derived files (index, rendered pages): never commit them\n*\n"
# An mtime within this much of the moment an entry was checked may hide a same-tick rewrite.
RACY_NS = 2_000_000_000
# Below this many bundles to parse, forking workers costs more than it saves.
PARALLEL_FROM = 48


@dataclass
class CaseDigest(Case):
    """A case as the archive-wide views see it: a `Case` without its bulky parts.

    Script sources are empty (name and hash kept), observations are reduced to
    `break_counts`, and `replays` holds only the records the views read: the latest
    per target (what the report matrix shows) and the last one appended (what `list`
    shows), in their original order, without the keys each observed (`observed`);
    none at all when asked for without history (`summaries(history=False)`, for
    `list`: `last_replay` says what it shows). Render a case page from the full `Case`.
    """

    break_counts: dict[ScriptRole, int] = field(default_factory=dict)  # graph break sites recorded per script
    last_replay: tuple[str, Verdict] | None = None  # (target, verdict) of the last record appended
    sha256: str = ""  # of the bundle file's bytes: the key of anything rendered from it
    recorded_s: float | None = None  # what its runs took at capture (timeouts.recorded_run_seconds): shard costs
    # The full case, when this digest was just parsed and the caller asked to keep it (never stored).
    parsed: Case | None = field(default=None, repr=False, compare=False)


def digest_of(case: Case, sha256: str) -> CaseDigest:
    """The digest of a parsed case (pure)."""
    latest: dict[str, int] = {}
    for index, record in sorted(enumerate(case.replays), key=lambda item: item[1].at):  # later records win
        latest[record.target] = index
    keep = set(latest.values()) | ({len(case.replays) - 1} if case.replays else set())
    return CaseDigest(
        id=case.id,
        title=case.title,
        pre=ScriptSource(case.pre.name, case.pre.sha256, ""),
        post=ScriptSource(case.post.name, case.post.sha256, "") if case.post else None,
        tags=list(case.tags),
        created=case.created,
        backend=case.backend,
        replays=[
            dataclasses.replace(record, observed={}) for index, record in enumerate(case.replays) if index in keep
        ],
        schema_version=case.schema_version,
        break_counts={which: len(observation.sites) for which, observation in case.observations.items()},
        last_replay=(case.replays[-1].target, case.replays[-1].verdict) if case.replays else None,
        sha256=sha256,
        recorded_s=recorded_run_seconds(case.capture),
    )


# Replay records are stored as rows in this field order (model.py is in the code fingerprint).
RECORD_FIELDS = [f.name for f in dataclasses.fields(ReplayRecord)]
SEVERITIES = {member.value: member for member in Severity}
SITE_CLASSES = {member.value: member for member in SiteClass}
VERDICTS = {member.value: member for member in Verdict}
ROLES = {member.value: member for member in ScriptRole}
STATUSES = {member.value: member for member in ScriptStatus}


def _record_row(record: ReplayRecord) -> list[Any]:
    row = [getattr(record, name) for name in RECORD_FIELDS]
    row[RECORD_FIELDS.index("severity")] = record.severity.value
    row[RECORD_FIELDS.index("sites")] = [[v.script, v.site_class.value, v.where, v.category] for v in record.sites]
    row[RECORD_FIELDS.index("observed")] = {}  # what was seen: the case page's business, not the views'
    row[PERF_AT] = None if record.perf is None else [to_plain(timed) for timed in record.perf]
    return row


def _record_from_row(row: list[Any]) -> ReplayRecord:
    """A stored row back to a record; TypeError when it is not a row casekit writes (the bundle is parsed again)."""
    if not _is_row(row):
        raise TypeError("a stored replay record is not a row of every field, each of its type")
    record = ReplayRecord(*row)
    # every enum back to its type, as the bundle loader gives it (a page cache key is made of these)
    record.verdict = VERDICTS[row[VERDICT_AT]]
    record.severity = SEVERITIES[row[SEVERITY_AT]]
    record.statuses = {ROLES[which]: STATUSES[status] for which, status in row[STATUSES_AT].items()}
    record.sites = [
        SiteVerdict(ROLES[script], SITE_CLASSES[kind], where, category)
        for script, kind, where, category in row[SITES_AT]
    ]
    for name in ("observed", "graphs", "compile_s", "fallbacks"):  # script -> ...: keyed by role again
        table = getattr(record, name)
        if table is not None:
            setattr(record, name, {ROLES[which]: value for which, value in table.items()})
    if row[PERF_AT] is not None:  # the bundle's own reader, every field checked (it raises: rebuilt)
        try:
            record.perf = [from_plain(PerfRecord, timed, "index", f"perf[{i}]") for i, timed in enumerate(row[PERF_AT])]
        except BundleError as error:
            raise TypeError(str(error)) from None
    return record


SEVERITY_AT, SITES_AT, PERF_AT = (
    RECORD_FIELDS.index("severity"),
    RECORD_FIELDS.index("sites"),
    RECORD_FIELDS.index("perf"),
)
VERDICT_AT, STATUSES_AT = RECORD_FIELDS.index("verdict"), RECORD_FIELDS.index("statuses")


def _texts(*values: Any) -> bool:
    return all(isinstance(value, str) for value in values)


def _table_of(value: Any, *kinds: type) -> bool:
    """A JSON object whose values are exactly of `kinds` (type(), not isinstance: a bool is not an int)."""
    return isinstance(value, dict) and all(type(item) in kinds for item in value.values())


def _script_table(value: Any, *kinds: type) -> bool:
    """A JSON object keyed by script role, whose values are exactly of `kinds`."""
    return _table_of(value, *kinds) and all(key in ROLES for key in value)


def _site_row(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 4
        and _texts(*value)
        and value[0] in ROLES
        and value[1] in SITE_CLASSES
    )


# What each stored record field must be (a test checks that every field of ReplayRecord has one).
ROW_CHECKS: dict[str, Callable[[Any], bool]] = {
    "at": _texts,
    "target": _texts,
    "torch": _texts,
    "runner": _texts,
    "verdict": lambda value: isinstance(value, str) and value in VERDICTS,
    "severity": lambda value: isinstance(value, str) and value in SEVERITIES,
    "statuses": lambda value: _script_table(value, str) and all(status in STATUSES for status in value.values()),
    "sites": lambda value: isinstance(value, list) and all(_site_row(site) for site in value),
    "observed": lambda value: _script_table(value, list),
    "reasons": lambda value: isinstance(value, list) and _texts(*value),
    "graphs": lambda value: value is None or _script_table(value, int),
    "compile_s": lambda value: value is None or _script_table(value, int, float),
    "timing_load": lambda value: value is None or isinstance(value, str),
    "fallbacks": lambda value: (
        value is None or (_script_table(value, list) and all(_texts(*frames) for frames in value.values()))
    ),
    "perf": lambda value: value is None or (isinstance(value, list) and all(isinstance(t, dict) for t in value)),
}


HEADER_FIELDS = 12  # what _header_json writes, in its order


def _header_json(digest: CaseDigest) -> list[Any]:
    return [
        digest.id,
        digest.title,
        [digest.pre.name, digest.pre.sha256],
        [digest.post.name, digest.post.sha256] if digest.post else None,
        digest.tags,
        digest.created,
        digest.backend,
        digest.last_replay,
        digest.schema_version,
        digest.break_counts,
        digest.sha256,
        digest.recorded_s,
    ]


def _history_text(digest: CaseDigest) -> str:
    return json.dumps([_record_row(record) for record in digest.replays], separators=(",", ":"))


def _is_row(row: Any) -> bool:
    """Whether a stored replay record has the shape and the types casekit writes."""
    if not isinstance(row, list) or len(row) != len(RECORD_FIELDS):
        return False
    return all(ROW_CHECKS[name](value) for name, value in zip(RECORD_FIELDS, row, strict=True))


def _pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and _texts(*value)


def _is_header(data: Any) -> bool:
    """Whether a stored digest header has the shape and the types casekit writes."""
    if not isinstance(data, list) or len(data) != HEADER_FIELDS:
        return False
    case_id, title, pre, post, tags, created, backend, last, schema_version, break_counts, sha256, recorded = data
    return (
        _texts(case_id, title, created, backend, sha256)
        and (recorded is None or type(recorded) in (int, float))
        and _pair(pre)
        and (post is None or _pair(post))
        and (last is None or (_pair(last) and last[1] in VERDICTS))
        and isinstance(tags, list)
        and _texts(*tags)
        and type(schema_version) is int
        and _script_table(break_counts, int)
    )


def _digest_from_header(data: list[Any]) -> CaseDigest:
    """A stored header back to a digest; TypeError when it is not one casekit writes (the index is rebuilt)."""
    if not _is_header(data):
        raise TypeError("a stored digest header is not of the shape and types casekit writes")
    case_id, title, pre, post, tags, created, backend, last, schema_version, break_counts, sha256, recorded = data
    return CaseDigest(
        id=case_id,
        title=title,
        pre=ScriptSource(pre[0], pre[1], ""),
        post=ScriptSource(post[0], post[1], "") if post else None,
        tags=tags,
        created=created,
        backend=backend,
        schema_version=schema_version,
        break_counts={ROLES[which]: count for which, count in break_counts.items()},
        last_replay=(str(last[0]), VERDICTS[last[1]]) if last else None,
        sha256=sha256,
        recorded_s=recorded,
    )


def code_fingerprint() -> str:
    """Changes whenever the code that reads bundles or builds digests does: an older index is rebuilt."""
    hasher = hashlib.sha256(f"{FORMAT}".encode())
    package = Path(__file__).parent.parent
    for module in (package / "bundle.py", package / "model.py", Path(__file__)):
        hasher.update(module.read_bytes())
    return hasher.hexdigest()[:16]


@dataclass
class Entry:
    """What the index knows about one bundle file."""

    size: int
    mtime_ns: int
    checked_ns: int  # when size/mtime were last confirmed to go with this digest
    digest: CaseDigest
    # The digest's replay records as stored, until someone needs them: `list` never does,
    # and decoding 10,000 histories would be most of its time.
    history_text: str | None = None

    def without_history(self) -> CaseDigest:
        """The digest with no replay records, whether or not they were decoded (the same answer either way)."""
        if not self.digest.replays:
            return self.digest
        light = copy.copy(self.digest)
        light.replays = []
        return light

    def with_history(self) -> CaseDigest:
        if self.history_text is not None:
            self.digest.replays = [_record_from_row(row) for row in json.loads(self.history_text)]
            self.history_text = None
        return self.digest


def parse_bundle_bytes(raw: bytes, path: Path) -> Case:
    """Parse a bundle read as bytes, with the same checks (and errors) as `Archive.load`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BundleError(path, None, f"cannot read: {error}") from None
    case = parse_case(text, path)
    if case.id != path.stem:
        raise BundleError(path, "id", f"{case.id!r} does not match the file name {path.stem!r}")
    return case


def _parse_one(path_text: str, keep_case: bool = False) -> tuple[str, Entry | None]:
    """Worker: one bundle -> (id, its entry), or (id, None) when it does not parse (the caller re-raises)."""
    path = Path(path_text)
    try:
        raw, stat = read_regular_file(path, MAX_BUNDLE_BYTES)  # never a link, a FIFO or a device; bounded
        case = parse_bundle_bytes(raw, path)
    except (OSError, UnreadableFile, BundleError):
        return path.stem, None
    digest = digest_of(case, hashlib.sha256(raw).hexdigest())
    if keep_case:
        digest.parsed = case
    return path.stem, Entry(stat.st_size, stat.st_mtime_ns, time.time_ns(), digest)


def _entry_json(entry: Entry) -> list[Any]:
    history = entry.history_text if entry.history_text is not None else _history_text(entry.digest)
    return [entry.size, entry.mtime_ns, entry.checked_ns, _header_json(entry.digest), history]


def parallel_workers(count: int) -> int:
    """How many forked workers `count` independent bundle parses are worth (1: do them here)."""
    if count < PARALLEL_FROM or sys.platform != "linux":
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, count // (PARALLEL_FROM // 2)))


class ArchiveIndex:
    """Load, refresh and save the index of one archive folder."""

    def __init__(self, root: Path, keep_cases: bool = False) -> None:
        self.root = root
        self.keep_cases = keep_cases  # digests parsed now keep their full case in `.parsed`
        self.seal = Seal.local()  # no key, no index: every bundle is parsed
        self.entries: dict[str, Entry] = {}
        self.errors: dict[str, BundleError] = {}  # bundles that do not parse, by id: reported, not fatal
        self.dirty = False

    def load(self) -> None:
        """Read the index; anything unreadable, unsealed, corrupt or from other code counts as empty."""
        try:
            self.entries = self._read_entries()
        except Exception:  # noqa: BLE001 -- a derived file: whatever is wrong with it, rebuild
            self.entries = {}
            self.dirty = True

    def _read_entries(self) -> dict[str, Entry]:
        """The entries of an index this user's casekit sealed, of this code, every field of its type.

        Read only from casekit's own folder (never through a link), as a regular file of bounded
        size, without blocking; anything else raises (OSError, UnreadableFile, ValueError, TypeError).
        """
        folder = cache_folder(self.root, create=False)
        if folder is None or self.seal is None:
            raise FileNotFoundError("no index of this user's casekit")
        raw = read_regular_bytes(folder / INDEX_FILE, MAX_INDEX_BYTES)
        tag = raw[len(TAG_HEAD) : SEALED_FROM]
        if not raw.startswith(TAG_HEAD) or not self.seal.verify("index", memoryview(raw)[SEALED_FROM:], tag):
            raise ValueError("not sealed with this user's key: not casekit's")
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != code_fingerprint():
            raise ValueError("written by other code")
        entries = {}
        for case_id, (size, mtime_ns, checked_ns, header, history) in data["entries"].items():
            if not (type(size) is type(mtime_ns) is type(checked_ns) is int) or not isinstance(history, str):
                raise TypeError("size and times are integers, the history a string")
            entries[case_id] = Entry(size, mtime_ns, checked_ns, _digest_from_header(header), history)
            if entries[case_id].digest.id != case_id:
                raise ValueError("an entry filed under another id")
        return entries

    def save(self) -> None:
        """Write the index atomically, sealed; an archive we cannot write to (or no key) goes without one."""
        if not self.dirty or self.seal is None:
            return
        document = {
            "format": code_fingerprint(),
            "entries": {case_id: _entry_json(entry) for case_id, entry in sorted(self.entries.items())},
        }
        sealed = b'",' + json.dumps(document, separators=(",", ":")).encode()[1:]  # all that follows the tag
        folder = cache_folder(self.root, create=True)
        if folder is None:
            return
        try:
            _ignore_everything(folder)
            write_atomic(folder / INDEX_FILE, TAG_HEAD + self.seal.tag("index", sealed) + sealed)
            self.dirty = False
        except OSError:
            pass

    def refresh(self, ids: list[str], history: bool = True) -> list[CaseDigest]:
        """The digests of `ids` (in that order), re-reading only the bundles that changed.

        Without history the digests' `replays` stay empty (see `CaseDigest`).
        Entries of bundles no longer on disk are dropped when the whole archive is
        refreshed. A bundle that does not parse is left out; its BundleError is in
        `self.errors` (one bad bundle in a shared archive must not hide the others).
        """
        stale: list[str] = []
        folder = os.fspath(self.root)
        for case_id in ids:
            try:
                # plain strings: 10,000 Path objects cost; lstat: a symlinked bundle is parsed (and refused)
                stat = os.lstat(f"{folder}/{case_id}.toml")
            except OSError:
                stale.append(case_id)  # vanished under us: parsing names the problem
                continue
            entry = self.entries.get(case_id)
            if entry is None or entry.size != stat.st_size or entry.mtime_ns != stat.st_mtime_ns:
                stale.append(case_id)
            elif stat.st_mtime_ns >= entry.checked_ns - RACY_NS and not self._same_bytes(case_id, entry):
                stale.append(case_id)
        self._parse(stale)
        ids = [case_id for case_id in ids if case_id not in self.errors]  # invalid bundles: in self.errors
        if not history:
            return [self.entries[case_id].without_history() for case_id in ids]
        damaged = []
        for case_id in ids:
            try:
                self.entries[case_id].with_history()
            except Exception:  # noqa: BLE001 -- a damaged stored history: parse the bundle again
                damaged.append(case_id)
        self._parse(damaged)
        return [self.entries[case_id].digest for case_id in ids if case_id not in self.errors]

    def drop_missing(self, present: list[str]) -> None:
        keep = set(present)
        for case_id in [c for c in self.entries if c not in keep]:
            del self.entries[case_id]
            self.dirty = True

    def _same_bytes(self, case_id: str, entry: Entry) -> bool:
        """A racy entry: re-hash the bundle; the same bytes keep the digest (and stop being racy)."""
        try:
            raw, stat = read_regular_file(self.root / f"{case_id}.toml", MAX_BUNDLE_BYTES)
        except (OSError, UnreadableFile):
            return False
        if hashlib.sha256(raw).hexdigest() != entry.digest.sha256 or stat.st_size != entry.size:
            return False
        entry.mtime_ns, entry.checked_ns = stat.st_mtime_ns, time.time_ns()
        self.dirty = True
        return True

    def _parse(self, stale: list[str]) -> None:
        if not stale:
            return
        self.dirty = True
        paths = [str(self.root / f"{case_id}.toml") for case_id in stale]
        workers = parallel_workers(len(paths))
        parse = functools.partial(_parse_one, keep_case=self.keep_cases)
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # fork: the workers inherit the imported modules, so a cold start stays cheap
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                results = list(pool.map(parse, paths, chunksize=max(1, len(paths) // (workers * 8))))
        else:
            results = [parse(path) for path in paths]
        failed = []
        for case_id, entry in results:
            if entry is None:
                failed.append(case_id)
                self.entries.pop(case_id, None)
            else:
                self.entries[case_id] = entry
        for case_id in failed:  # the real error of each, naming the file and the field
            self.errors[case_id] = _bundle_error(self.root / f"{case_id}.toml", case_id)


def _ignore_everything(folder: Path) -> None:
    """`folder/.gitignore` of `*`, unless it already is exactly that (whatever else stands there is replaced)."""
    path = folder / ".gitignore"
    try:
        if read_regular_bytes(path, len(IGNORE_ALL)) == IGNORE_ALL.encode():
            return
    except (FileNotFoundError, UnreadableFile):
        pass
    try:
        write_atomic(path, IGNORE_ALL)  # a rename: a link in its place is replaced, never written through
    except OSError:
        pass  # a folder planted in its place: the index is still casekit's (sealed), kept without it


def _bundle_error(path: Path, case_id: str) -> BundleError:
    """The error a full parse gives for a bundle the index could not read."""
    try:
        case = load_case(path)
    except BundleError as error:
        return error
    if case.id != case_id:
        return BundleError(path, "id", f"{case.id!r} does not match the file name {case_id!r}")
    return BundleError(path, None, "changed while being read; run again")


def summaries(
    root: Path, ids: list[str], whole_archive: bool, keep_cases: bool = False, history: bool = True
) -> tuple[list[CaseDigest], list[BundleError]]:
    """Digests of the bundles `ids` under `root`, through (and refreshing) the archive's index.

    With keep_cases, the digests of bundles parsed in this call carry the full case
    (`.parsed`), so a caller that needs it (the HTML report) does not parse them twice.
    Without history, their `replays` stay empty (`last_replay` is always there)."""
    index = ArchiveIndex(root, keep_cases)
    index.load()
    try:
        digests = index.refresh(ids, history)
        if whole_archive:
            index.drop_missing(ids)
    finally:
        index.save()
    return digests, [index.errors[case_id] for case_id in ids if case_id in index.errors]
