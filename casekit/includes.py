"""The files of a case's folder: the scripts' names, and the files a repro needs beside them (a helper
module, a small config), embedded, checked, laid out.

A bundle stores each included file under its path relative to the script's
folder; every runner writes them back beside the script with the same paths,
so `import helper` and `open("config.json")` work as with `python repro.py`.

The folder an include comes from is untrusted (a clone, a teammate's tarball):
no symlink or hard link in it is followed, sizes are checked before reading,
and the paths must lay out beside the scripts on any file system, at capture
and again when a bundle is loaded.
"""

from __future__ import annotations

import ast
import base64
import binascii
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath

from casekit.errors import CasekitError, ScriptNameError
from casekit.fsutil import UnreadableFile, read_regular_bytes
from casekit.model import IncludedFile
from casekit.pysource import parse_python

# A script name becomes a file name on the replaying host: one plain name, never a path.
SCRIPT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")
MAX_FILE_BYTES = 512 * 1024
MAX_BINARY_BYTES = 64 * 1024  # base64 grows a third and is unreadable in a diff: keep binaries small
MAX_TOTAL_BYTES = 2 * 1024 * 1024
MAX_FILES = 200
SKIPPED_PARTS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache"}


class IncludeError(CasekitError):
    """An included file is missing, too large, outside the script's folder or badly named."""


def check_script_name(name: str) -> str:
    """A script name is one plain file name (letters, digits, '.', '_', '+', '-'): never a path, never hidden."""
    if not isinstance(name, str) or not SCRIPT_NAME.fullmatch(name) or ".." in name:
        raise ScriptNameError(
            f"invalid script name {name!r}: a bundle's script name must be one plain file name "
            "(letters, digits, '.', '_', '+', '-'; at most 128 characters; no folders)"
        )
    return name


def check_include_path(path: str) -> str:
    """A relative '/'-separated path whose every component is a safe plain name (no '..', no absolute)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        raise IncludeError(f"invalid included path {path!r}: use a relative path with '/' separators")
    for part in path.split("/"):
        try:
            check_script_name(part)
        except ScriptNameError:
            raise IncludeError(
                f"invalid included path {path!r}: component {part!r} is not a plain name "
                "(letters, digits, '.', '_', '+', '-'; no '..', no hidden files)"
            ) from None
    return path


def file_bytes(included: IncludedFile) -> bytes:
    """The content of an included file, checked against its hash."""
    check_include_path(included.path)
    if (included.text is None) == (included.base64 is None):
        raise IncludeError(f"included file {included.path}: exactly one of 'text' and 'base64' must be set")
    try:
        data = included.text.encode("utf-8") if included.text is not None else base64.b64decode(included.base64 or "")
    except binascii.Error as error:
        raise IncludeError(f"included file {included.path}: 'base64' is not base64 ({error})") from None
    if hashlib.sha256(data).hexdigest() != included.sha256:
        raise IncludeError(f"included file {included.path}: sha256 does not match its content (edited by hand?)")
    return data


def check_includes(includes: Iterable[IncludedFile], script_names: Iterable[str] = ()) -> None:
    """Every path safe, every hash right, and the paths lay out beside the scripts (what loading a bundle checks)."""
    includes = list(includes)
    for included in includes:
        file_bytes(included)
    check_layout([included.path for included in includes], script_names)


def check_layout(paths: Iterable[str], script_names: Iterable[str] = ()) -> None:
    """Included paths that can all be written beside the scripts, on any file system.

    No path twice; none that is also another's folder (`x` and `x/y.py`: one of them cannot be
    written); none that starts with a script's name (it would replace the script: other code
    would run, and its verdict would be forged); and none of these up to case, since on a
    case-insensitive file system (macOS, Windows) `Helper.py` and `helper.py` are one file.
    """
    scripts = {name.lower(): name for name in script_names}
    files: dict[str, str] = {}  # case-folded path -> the included path
    folders: dict[str, str] = {}  # case-folded folder -> an included path under it
    for path in paths:
        folded = path.lower()
        parts = folded.split("/")
        if parts[0] in scripts:
            raise IncludeError(
                f"included file {path} is named like the script {scripts[parts[0]]}: it would replace it"
            )
        if folded in files:
            if files[folded] == path:
                raise IncludeError(f"included file {path} appears twice")
            raise IncludeError(
                f"included files {files[folded]} and {path} differ only in case: one file on macOS and Windows"
            )
        if folded in folders:
            raise IncludeError(f"included file {path} is also the folder of included file {folders[folded]}")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in files:
                raise IncludeError(f"included file {files[folder]} is also the folder of included file {path}")
            folders.setdefault(folder, path)
        files[folded] = path


def embed(data: bytes, relative: str) -> IncludedFile:
    digest = hashlib.sha256(data).hexdigest()
    try:
        return IncludedFile(path=relative, sha256=digest, text=data.decode("utf-8"))
    except UnicodeDecodeError:
        if len(data) > MAX_BINARY_BYTES:
            raise IncludeError(
                f"included binary file {relative} is {len(data)} bytes (at most {MAX_BINARY_BYTES}): "
                "generate it in the script instead"
            ) from None
        return IncludedFile(path=relative, sha256=digest, base64=base64.b64encode(data).decode("ascii"))


def collect_includes(script: Path, requested: Iterable[Path], other_scripts: Sequence[Path] = ()) -> list[IncludedFile]:
    """Read `--include` files and folders (relative to the current folder) as paths beside `script`.

    `other_scripts` (the post-fix, in the same folder) are left out like `script` and keep their names.
    Every refusal names the file: a symlink, a hard link, a FIFO or device, a file over the limits
    (from its size, before it is read), paths that cannot lay out beside the scripts.
    """
    scripts = [script, *other_scripts]
    base = script.resolve().parent
    leave_out = {path.resolve() for path in scripts}
    found: dict[str, tuple[Path, os.stat_result]] = {}
    for item in requested:
        if not os.path.lexists(item):
            raise IncludeError(f"--include {item}: no such file or folder")
        if os.path.islink(item):
            raise IncludeError(f"--include {item}: is a symbolic link; --include follows no link")
        resolved = item.resolve()  # the folders leading to it are the user's own path
        if base != resolved and base not in resolved.parents:
            raise IncludeError(f"--include {item}: not inside the script's folder {script.parent or '.'}")
        for path, info in _files_under(resolved, item):
            relative = path.relative_to(base).as_posix()
            if path in leave_out or path.suffix == ".pyc":
                continue
            _check_plain_file(relative, info)
            found[check_include_path(relative)] = (path, info)
            if len(found) > MAX_FILES:
                raise IncludeError(f"--include names over {MAX_FILES} files: include what the repro reads")
    check_layout(sorted(found), [path.name for path in scripts])
    for relative, (_, info) in sorted(found.items()):
        if info.st_size > MAX_FILE_BYTES:
            raise IncludeError(f"included file {relative} is {info.st_size} bytes (at most {MAX_FILE_BYTES})")
    if sum(info.st_size for _, info in found.values()) > MAX_TOTAL_BYTES:
        raise IncludeError(f"included files exceed {MAX_TOTAL_BYTES} bytes: include only what the repro needs")
    embedded, total = [], 0
    for relative, (path, _) in sorted(found.items()):
        data = _read_included(path, relative)
        total += len(data)  # again on what was read: a file may have grown since its stat
        if total > MAX_TOTAL_BYTES:
            raise IncludeError(f"included files exceed {MAX_TOTAL_BYTES} bytes: include only what the repro needs")
        embedded.append(embed(data, relative))
    return embedded


def _files_under(top: Path, item: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """`top` itself, or every entry below it but the skipped folders, each with its lstat: no link is followed."""
    pending = [top]  # a stack, not recursion: a hostile folder may nest thousands deep
    while pending:
        path = pending.pop()
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode):
                yield path, info
                continue
            with os.scandir(path) as scan:
                names = sorted((entry.name for entry in scan), reverse=True)  # popped in name order
        except OSError as error:
            raise IncludeError(f"--include {item}: cannot read {path}: {error.strerror or error}") from None
        pending += [path / name for name in names if name not in SKIPPED_PARTS]


def _check_plain_file(relative: str, info: os.stat_result) -> None:
    """A regular file with one name: a symlink or a hard link could be any file of this machine (a key, /proc)."""
    if stat.S_ISLNK(info.st_mode):
        raise IncludeError(f"included file {relative} is a symbolic link: --include follows no link")
    if not stat.S_ISREG(info.st_mode):
        raise IncludeError(f"included file {relative} is not a regular file (a FIFO, socket or device?)")
    if info.st_nlink > 1:
        raise IncludeError(
            f"included file {relative} is a hard link (one of {info.st_nlink} names of one file): "
            "--include follows no link"
        )


def _read_included(path: Path, relative: str) -> bytes:
    """The bytes, bounded, re-checked on the open file (it may have been swapped for a link since its stat)."""
    try:
        return read_regular_bytes(path, MAX_FILE_BYTES, single_link=True)
    except FileNotFoundError:
        raise IncludeError(f"included file {relative} disappeared while being read") from None
    except UnreadableFile as why:
        raise IncludeError(f"included file {relative} {why}") from None


def lay_out(folder: Path, includes: Iterable[IncludedFile]) -> None:
    """Write included files under `folder` with their relative paths: never outside it, never over a file there."""
    includes = list(includes)
    check_layout([included.path for included in includes])
    root = folder.resolve()
    for included in includes:
        data = file_bytes(included)
        target = root.joinpath(*PurePosixPath(included.path).parts)
        if root not in target.resolve().parents:
            raise IncludeError(f"included file {included.path} would leave the script's folder")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as handle:  # "x": the script beside it is never replaced
                handle.write(data)
        except FileExistsError:
            raise IncludeError(f"included file {included.path} would replace a file beside the script") from None
        except OSError as error:
            raise IncludeError(f"included file {included.path} cannot be laid out: {error.strerror or error}") from None


def missing_includes(script: Path, source: str, included: Iterable[IncludedFile]) -> list[str]:
    """What the script (and its included modules) imports or opens from its folder that is not included."""
    base = script.resolve().parent
    have = {f.path for f in included}
    have_dirs = {str(PurePosixPath(p).parent) for p in have}
    sources = [(script.name, source)] + [
        (f.path, f.text) for f in included if f.path.endswith(".py") and f.text is not None
    ]
    problems: list[str] = []
    for name, text in sources:
        try:
            tree = parse_python(text)
        except SyntaxError:
            continue
        for module in sorted(_imported_top_modules(tree)):
            for candidate in (f"{module}.py", module):
                if (base / candidate).exists() and candidate not in have and candidate not in have_dirs:
                    problems.append(f"{name} imports `{module}` from its folder: pass --include {candidate}")
                    break
        for literal in sorted(_opened_literals(tree)):
            if (base / literal).is_file() and literal not in have:
                problems.append(f"{name} reads `{literal}` from its folder: pass --include {literal}")
    return sorted(set(problems))


def _imported_top_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _opened_literals(tree: ast.AST) -> set[str]:
    """Relative string literals passed to open(), Path(...) or a read_*/load* call."""
    literals: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in ("open", "Path", "load", "loadtxt", "read_csv", "read_text", "read_bytes"):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            value = first.value
            if value and not value.startswith("/") and "\n" not in value and len(value) < 200:
                literals.add(value[2:] if value.startswith("./") else value)
    return literals
