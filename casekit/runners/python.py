"""The `python` runner: an interpreter that already exists (`--python PATH`, or casekit's own)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec
from casekit.runners.process import EnvironmentUnusable, check_interpreter, probe_environment, run_probe_subprocess
from casekit.runners.sandbox import Sandbox

# Read from the package metadata: importing torch here would double the 3-10 s import
# the probe pays anyway (a broken torch still fails clearly, in the probe).
VERSION_QUERY = (
    "import sys, importlib.metadata as m\n"
    "try:\n    v = m.version('torch')\n"
    "except m.PackageNotFoundError:\n    raise SystemExit(\"ModuleNotFoundError: No module named 'torch'\")\n"
    "print('casekit-versions', v, sys.version.split()[0])"
)
QUERY_TIMEOUT_S = 300.0


def query_versions(python: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """(torch version, python version) of an interpreter; EnvironmentUnusable with one line if it cannot tell."""
    check_interpreter(python)
    try:
        done = subprocess.run(
            [python, "-c", VERSION_QUERY],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            env=probe_environment(env),
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentUnusable(f"python {python}: importing torch took over {QUERY_TIMEOUT_S:.0f} s") from None
    except OSError as error:
        raise EnvironmentUnusable(f"python {python}: cannot run: {error.strerror or error}") from None
    for line in done.stdout.splitlines():
        if line.startswith("casekit-versions "):
            _, torch_version, python_version = line.split()
            return torch_version, python_version
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    reason = lines[-1] if lines else f"exit status {done.returncode}, no output"
    raise EnvironmentUnusable(f"python {python}: torch is not importable: {reason}")


def version_matches(installed: str, requested: str) -> bool:
    """'2.13.0+cpu' satisfies '2.13', '2.13.0' and '2.13.0+cpu'; not '2.1' nor '2.13.1'."""
    if "+" in requested:
        return installed == requested
    release = installed.split("+", 1)[0]
    return release == requested or release.startswith(requested + ".")


class PythonRunner(Runner):
    """Runs the probe with an existing interpreter; casekit installs nothing."""

    name = "python"

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.python = self._locate(spec.python)
        self.sandbox = Sandbox.from_options(spec.options)
        self.torch_version: str | None = None
        self.python_version: str | None = None

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
        self.sandbox.check()
        progress(f"checking torch in {self.python} …")
        torch_version, python_version = query_versions(self.python)
        if self.spec.torch and not version_matches(torch_version, self.spec.torch):
            raise EnvironmentUnusable(
                f"python {self.python}: has torch {torch_version}, not the requested {self.spec.torch}"
            )
        self.torch_version, self.python_version = torch_version, python_version
        progress(f"python {python_version} with torch {torch_version} at {self.python}")

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        self.prepare(progress)
        return run_probe_subprocess(self.python, jobs, progress, sandbox=self.sandbox, scheduling=self.scheduling)

    def describe(self) -> dict[str, object]:
        return {
            **super().describe(),
            "python_executable": self.python,
            "torch": self.torch_version,
            "python": self.python_version,
        }
