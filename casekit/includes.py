"""Files a repro needs beside it (a helper module, a small config): embedded, checked, laid out.

A bundle stores each included file under its path relative to the script's
folder; every runner writes them back beside the script with the same paths,
so `import helper` and `open("config.json")` work as with `python repro.py`.
"""

from __future__ import annotations

import ast
import base64
import hashlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from casekit.bundle import check_script_name
from casekit.errors import CasekitError, ScriptNameError
from casekit.model import IncludedFile

MAX_FILE_BYTES = 512 * 1024
MAX_BINARY_BYTES = 64 * 1024  # base64 grows a third and is unreadable in a diff: keep binaries small
MAX_TOTAL_BYTES = 2 * 1024 * 1024
MAX_FILES = 200
SKIPPED_PARTS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache"}


class IncludeError(CasekitError):
    """An included file is missing, too large, outside the script's folder or badly named."""


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
    data = included.text.encode("utf-8") if included.text is not None else base64.b64decode(included.base64 or "")
    if hashlib.sha256(data).hexdigest() != included.sha256:
        raise IncludeError(f"included file {included.path}: sha256 does not match its content (edited by hand?)")
    return data


def check_includes(includes: Iterable[IncludedFile]) -> None:
    """Every path safe, every hash right, no path twice (what loading a bundle checks)."""
    seen: set[str] = set()
    for included in includes:
        file_bytes(included)
        if included.path in seen:
            raise IncludeError(f"included file {included.path} appears twice")
        seen.add(included.path)


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


def collect_includes(script: Path, requested: Iterable[Path]) -> list[IncludedFile]:
    """Read `--include` files and folders (relative to the current folder) as paths beside `script`."""
    base = script.resolve().parent
    files: dict[str, Path] = {}
    for item in requested:
        if not item.exists():
            raise IncludeError(f"--include {item}: no such file or folder")
        resolved = item.resolve()
        if base != resolved and base not in resolved.parents:
            raise IncludeError(f"--include {item}: not inside the script's folder {script.parent or '.'}")
        found = [resolved] if resolved.is_file() else sorted(p for p in resolved.rglob("*") if p.is_file())
        for path in found:
            relative = path.relative_to(base).as_posix()
            if SKIPPED_PARTS & set(relative.split("/")) or path.suffix == ".pyc" or path == script.resolve():
                continue
            files[check_include_path(relative)] = path
    if len(files) > MAX_FILES:
        raise IncludeError(f"--include names {len(files)} files (at most {MAX_FILES}): include what the repro reads")
    embedded, total = [], 0
    for relative, path in sorted(files.items()):
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise IncludeError(f"included file {relative} is {len(data)} bytes (at most {MAX_FILE_BYTES})")
        total += len(data)
        if total > MAX_TOTAL_BYTES:
            raise IncludeError(f"included files exceed {MAX_TOTAL_BYTES} bytes: include only what the repro needs")
        embedded.append(embed(data, relative))
    return embedded


def lay_out(folder: Path, includes: Iterable[IncludedFile]) -> None:
    """Write included files under `folder` with their relative paths (never outside it)."""
    root = folder.resolve()
    for included in includes:
        data = file_bytes(included)
        target = root.joinpath(*PurePosixPath(included.path).parts)
        if root not in target.resolve().parents:
            raise IncludeError(f"included file {included.path} would leave the script's folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


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
            tree = ast.parse(text)
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
