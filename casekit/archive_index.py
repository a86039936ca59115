"""A derived index of the archive: per bundle (size, mtime_ns, sha256) -> the digest list/report/shard need.

Never the source of truth: the bundles are. The index lives in the archive's own
`.casekit/` folder (with a `.gitignore` of `*`, so it never shows up in the user's
repository), next to the bundles it describes: it moves, is copied and is deleted
with them, and needs no key for "which archive". An archive we cannot write to
simply goes without (every bundle is parsed, as before).

Freshness follows git's index: a bundle whose size and mtime_ns match its entry is
trusted without reading it, unless its mtime is so close to the moment the entry
was checked that a same-tick rewrite could hide (then it is re-hashed: same bytes,
same digest). A changed bundle is re-parsed, a new one added, a deleted one dropped.
A missing, corrupt or older-format index is rebuilt silently. Writes are atomic
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.bundle import MAX_BUNDLE_BYTES, load_case, parse_case, write_atomic
from casekit.errors import BundleError
from casekit.fsutil import UnreadableFile, read_regular_bytes, read_regular_file
from casekit.model import Case, ReplayRecord, ScriptRole, ScriptSource, Severity, SiteClass, SiteVerdict, Verdict

INDEX_DIR = ".casekit"
INDEX_FILE = "index.json"
FORMAT = 1
# About 1 KB an entry: far above a 10,000-case archive, below what would exhaust memory.
MAX_INDEX_BYTES = 256 * 1024 * 1024
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

    break_counts: dict[str, int] = field(default_factory=dict)  # script -> graph break sites recorded
    last_replay: tuple[str, str] | None = None  # (target, verdict) of the last record appended
    sha256: str = ""  # of the bundle file's bytes: the key of anything rendered from it
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
        last_replay=(case.replays[-1].target, str(case.replays[-1].verdict)) if case.replays else None,
        sha256=sha256,
    )


# Replay records are stored as rows in this field order (model.py is in the code fingerprint).
RECORD_FIELDS = [f.name for f in dataclasses.fields(ReplayRecord)]
SEVERITIES = {member.value: member for member in Severity}
SITE_CLASSES = {member.value: member for member in SiteClass}
VERDICTS = {member.value: member for member in Verdict}
ROLES = {member.value: member for member in ScriptRole}


def _record_row(record: ReplayRecord) -> list[Any]:
    row = [getattr(record, name) for name in RECORD_FIELDS]
    row[RECORD_FIELDS.index("severity")] = record.severity.value
    row[RECORD_FIELDS.index("sites")] = [[v.script, v.site_class.value, v.where, v.category] for v in record.sites]
    row[RECORD_FIELDS.index("observed")] = {}  # what was seen: the case page's business, not the views'
    return row


def _record_from_row(row: list[Any]) -> ReplayRecord:
    record = ReplayRecord(*row)
    # every enum back to its type, as the bundle loader gives it (a page cache key is made of these)
    record.verdict = VERDICTS[row[VERDICT_AT]]
    record.severity = SEVERITIES[row[SEVERITY_AT]]
    record.sites = [
        SiteVerdict(ROLES[script], SITE_CLASSES[kind], where, category)
        for script, kind, where, category in row[SITES_AT]
    ]
    return record


SEVERITY_AT, SITES_AT = RECORD_FIELDS.index("severity"), RECORD_FIELDS.index("sites")
VERDICT_AT = RECORD_FIELDS.index("verdict")


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
    ]


def _history_text(digest: CaseDigest) -> str:
    return json.dumps([_record_row(record) for record in digest.replays], separators=(",", ":"))


def _digest_from_header(data: list[Any]) -> CaseDigest:
    case_id, title, pre, post, tags, created, backend, last, schema_version, break_counts, sha256 = data
    return CaseDigest(
        id=case_id,
        title=title,
        pre=ScriptSource(pre[0], pre[1], ""),
        post=ScriptSource(post[0], post[1], "") if post else None,
        tags=tags,
        created=created,
        backend=backend,
        schema_version=schema_version,
        break_counts=break_counts,
        last_replay=(str(last[0]), str(last[1])) if last else None,
        sha256=sha256,
    )


def code_fingerprint() -> str:
    """Changes whenever the code that reads bundles or builds digests does: an older index is rebuilt."""
    hasher = hashlib.sha256(f"{FORMAT}".encode())
    for module in ("bundle.py", "model.py", "archive_index.py"):
        hasher.update((Path(__file__).parent / module).read_bytes())
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
        self.folder = root / INDEX_DIR
        self.path = self.folder / INDEX_FILE
        self.entries: dict[str, Entry] = {}
        self.errors: dict[str, BundleError] = {}  # bundles that do not parse, by id: reported, not fatal
        self.dirty = False

    def load(self) -> None:
        """Read the index; anything unreadable, corrupt or from other code counts as empty."""
        self.entries = {}
        try:
            # a regular file of bounded size, never through a link, without blocking (a FIFO, /dev/zero)
            data = json.loads(read_regular_bytes(self.path, MAX_INDEX_BYTES))
            if data.get("format") != code_fingerprint():
                return
            for case_id, (size, mtime_ns, checked_ns, header, history) in data["entries"].items():
                if not (type(size) is type(mtime_ns) is type(checked_ns) is int) or not isinstance(history, str):
                    raise TypeError("size and times are integers, the history a string")
                self.entries[case_id] = Entry(size, mtime_ns, checked_ns, _digest_from_header(header), history)
        except Exception:  # noqa: BLE001 -- a derived file: whatever is wrong with it, rebuild
            self.entries = {}
            self.dirty = True

    def save(self) -> None:
        """Write the index atomically; an archive we cannot write to goes without one."""
        if not self.dirty:
            return
        document = {
            "format": code_fingerprint(),
            "entries": {case_id: _entry_json(entry) for case_id, entry in sorted(self.entries.items())},
        }
        try:
            self.folder.mkdir(exist_ok=True)
            ignore = self.folder / ".gitignore"
            if not ignore.exists():
                write_atomic(ignore, "# casekit's derived files (index, rendered pages): never commit them\n*\n")
            write_atomic(self.path, json.dumps(document, separators=(",", ":")))
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
