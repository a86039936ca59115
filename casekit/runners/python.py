"""The `python` runner: an interpreter that already exists (`--python PATH`, or casekit's own)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from casekit.errors import RunnerError
from casekit.runners.interface import (
    ProbeBatchResult,
    ProbeJob,
    ProbeScheduling,
    ProbeSession,
    ProgressFn,
    Runner,
    ScriptEntry,
    TargetSpec,
    VersionSource,
    variant_flags,
)
from casekit.runners.process import EnvironmentUnusable, check_interpreter, torch_missing
from casekit.runners.sandbox import BWRAP_ALLOW_EXAMPLES, KNOWN_OPTIONS, Sandbox, runtime_of
from casekit.runners.torch_source.request import matches_request
from casekit.runners.warm import WarmSession
from casekit.scrub import Scrubber, machine_folders


def query_versions(python: str, allowed: tuple[str, ...] = ()) -> tuple[str, str]:
    """(torch version, python version) of an interpreter, read from its files: nothing of it runs but
    `python -I -S` (no site hook, no .pth code), so a hostile package in it cannot run outside the
    sandbox. Whether torch really imports, the probe tells, inside. `allowed`: the folders --allow read
    shows beside the environment (a .pth line may name them). EnvironmentUnusable in one line."""
    check_interpreter(python)
    try:
        runtime = runtime_of(python, allowed)
    except RunnerError as error:
        raise EnvironmentUnusable(str(error)) from None
    version = installed_version("torch", runtime.import_path)
    if version is None:
        refused = f" (the sandbox does not show {'; '.join(runtime.refused)})" if runtime.refused else ""
        raise EnvironmentUnusable(torch_missing(python, "ModuleNotFoundError: No module named 'torch'" + refused))
    return version, runtime.python_version


def portable_interpreter(python: str) -> str:
    """An interpreter path fit for a shared bundle: its last three parts (`…/nightly/bin/python`,
    `…/torch-2.5.1-py3.11-6c036d11/bin/python` for a managed env), never the folders above them, under the
    home folder either (`~/.cache/casekit/envs/...` says how this machine is laid out, not which
    interpreter it was); casekit's own interpreter is `<python>/bin/python`."""
    if not python.startswith(("/", "~")):
        return python  # a bare name looked up on PATH ("python3.12") names no folder
    where = Scrubber(machine_folders()).text(os.path.expanduser(python))
    if where.startswith("<"):  # casekit's own interpreter prefix: a placeholder names no folder
        return where
    return "…/" + "/".join(PurePosixPath(python).parts[-3:])


def installed_version(name: str, import_path: Iterable[str]) -> str | None:
    """The version of distribution `name` found first on `import_path` (its dist-info METADATA), or for a
    source checkout on the path, the `__version__` its version.py states; None when it is not there."""
    wanted = name.lower().replace("-", "_")
    for folder in import_path:
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in entries:
            stem = entry.removesuffix(".dist-info")
            if stem == entry or stem.rpartition("-")[0].lower().replace("-", "_").replace(".", "_") != wanted:
                continue
            try:
                with open(os.path.join(folder, entry, "METADATA"), "rb") as handle:
                    head = handle.read(64 << 10).decode("utf-8", "replace")
            except OSError:
                continue
            for line in head.splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
        version_file = os.path.join(folder, wanted, "version.py")
        if os.path.isfile(version_file):
            try:
                with open(version_file, "rb") as handle:
                    match = re.search(rb"__version__\s*=\s*['\"]([^'\"]+)['\"]", handle.read(64 << 10))
            except OSError:
                continue
            if match:
                return match.group(1).decode("ascii", "replace")
    return None


def torch_without_bytecode(python: str) -> str | None:
    """The site folder whose torch has no bytecode for this interpreter (None: it has, or no torch).

    The sandbox shows an interpreter read-only, so Python can never write that cache there: every
    target start compiles torch again (~9 s of a ~14 s import, measured in bench/bytecode_bench.py)."""
    try:
        runtime = runtime_of(python)
    except RunnerError:
        return None
    tag = "cpython-" + "".join(runtime.python_version.split(".")[:2])
    for folder in runtime.import_path:
        init = os.path.join(folder, "torch", "__init__.py")
        if os.path.isfile(init):
            cached = os.path.join(folder, "torch", "__pycache__", f"__init__.{tag}.pyc")
            return None if os.path.isfile(cached) else folder
    return None


_TOLD_BYTECODE: set[str] = set()  # interpreters already told (once per process)


def bytecode_note(python: str) -> str | None:
    """One line, once per interpreter, when its torch lacks bytecode: why it matters and the remedy."""
    site = torch_without_bytecode(python)
    if site is None or python in _TOLD_BYTECODE:
        return None
    _TOLD_BYTECODE.add(python)
    return (
        f"python {python}: torch has no bytecode in {site}, and the sandbox cannot write it: each target start "
        f"compiles torch again (imports take ~3x); compile it once: {python} -m compileall -q -j 0 {site}"
    )


class PythonRunner(Runner):
    """Runs the probe with an existing interpreter; casekit installs nothing."""

    name = "python"
    versions = VersionSource.INTERPRETERS  # each version is the torch of an interpreter the user names
    sandbox_name = "bubblewrap"
    allow_options = frozenset(KNOWN_OPTIONS)
    allow_examples = BWRAP_ALLOW_EXAMPLES

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.python = self._locate(spec.python)
        self.sandbox = Sandbox.from_options(spec.options)
        self.torch_version: str | None = None
        self.python_version: str | None = None

    @classmethod
    def label_of(cls, spec: TargetSpec) -> str:
        """The interpreter without this machine's folders, the same in the replay JSON, the bundles'
        history and every report: 'python:…/nightly/bin/python' (the path's last three parts, wherever it
        is), 'python:current' for casekit's own interpreter."""
        return f"{spec.runner}:{portable_interpreter(spec.python) if spec.python else 'current'}"

    @classmethod
    def display_of(cls, spec: TargetSpec) -> str:
        """'python:/home/me/envs/nightly/bin/python': the path as given, for the person at this machine."""
        return f"{spec.runner}:{spec.python or 'current'}"

    @classmethod
    def replay_flags(cls, spec: TargetSpec, *, say_runner: bool = True) -> list[str]:
        """`--python PATH` alone selects an interpreter target (a placeholder where none was given)."""
        return ["--python", spec.python or f"PYTHON_WITH_TORCH_{spec.torch or 'VERSION'}", *variant_flags(spec)]

    @staticmethod
    def _locate(python: str | None) -> str:
        if python is None:
            return sys.executable
        if os.sep not in python:  # a bare name such as "python3.12": look it up on PATH
            return shutil.which(python) or python
        return os.path.abspath(os.path.expanduser(python))

    def prepare(self, progress: ProgressFn) -> None:
        """Check the interpreter runs and imports torch (paid once per runner; tells the version)."""
        if self.torch_version is not None:
            return
        progress(f"checking torch in {self.python} …")
        torch_version, python_version = query_versions(self.python, self.sandbox.reads)
        self.sandbox.check(self.python)
        if self.spec.torch and not matches_request(torch_version, self.spec.torch):
            raise EnvironmentUnusable(
                f"python {self.python}: has torch {torch_version}, not the requested {self.spec.torch}"
            )
        self.torch_version, self.python_version = torch_version, python_version
        progress(f"python {python_version} with torch {torch_version} at {self.python}")
        note = bytecode_note(self.python)
        if note is not None:
            progress(note)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """One batch in a session of its own (one torch import)."""
        self.prepare(progress)
        with WarmSession(self.python, None, self.sandbox, scheduling=self.scheduling) as session:
            return session.run_probe(jobs, progress)

    def open_session(
        self,
        entry: ScriptEntry,
        *,
        scheduling: ProbeScheduling | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProbeSession:
        """One warm probe in this interpreter, in the runner's sandbox, for every batch of `entry`."""
        return WarmSession(self.python, entry, self.sandbox, env, scheduling or self.scheduling)

    def describe(self) -> dict[str, object]:
        return {
            **super().describe(),
            "python_executable": self.python,
            "torch": self.torch_version,
            "python": self.python_version,
        }
