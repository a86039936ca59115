"""The `venv` runner: a managed virtual environment per (python, torch, CUDA, index, pins)."""

from __future__ import annotations

import shutil
from pathlib import Path

from casekit.errors import EnvironmentFailed
from casekit.runners.interface import HostInterpreter, ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec
from casekit.runners.process import EnvironmentUnusable, run_probe_subprocess
from casekit.runners.sandbox import BWRAP_ALLOW_EXAMPLES, KNOWN_OPTIONS, Sandbox
from casekit.runners.venv.cache import CachedEnv, EnvRequest, list_envs, mark_broken, why_not_ready
from casekit.settings import cache_root
from casekit.runners.venv.install import ISOLATING_ENV, choose_installer, ensure_env, request_for, resolve_torch_version
from casekit.versions import is_exact, is_release_prefix, pick_newest


class VenvRunner(Runner):
    """A managed, cached virtual environment with the requested torch (and pins)."""

    name = "venv"
    builds_envs = True
    pins_libraries = True
    sandbox_name = "bubblewrap"
    allow_options = frozenset(KNOWN_OPTIONS)
    allow_examples = BWRAP_ALLOW_EXAMPLES

    def __init__(self, spec: TargetSpec, cache_dir: Path | None = None, installer: str | None = None) -> None:
        super().__init__(spec)
        self.root = cache_dir or cache_root()
        self.installer = installer or choose_installer()
        self.env: CachedEnv | None = None

    @classmethod
    def free_build_bytes(cls) -> int | None:
        """Free bytes on the disk of the env cache (or its nearest existing parent, before the first build)."""
        folder = cache_root()
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        return shutil.disk_usage(folder).free

    def prepare(self, progress: ProgressFn) -> None:
        """Resolve the torch version, then reuse or build the env."""
        if self.env is not None and why_not_ready(self.env.path) is None:
            return
        self.env = ensure_env(self._request(progress), self.root, progress, self.installer)

    def _request(self, progress: ProgressFn) -> EnvRequest:
        requested = self.spec.torch
        if requested and is_exact(requested):
            return request_for(self.spec, requested)
        if requested and not is_release_prefix(requested):
            raise EnvironmentFailed(f"not a torch version: {requested!r} (try 2.5.1 or 2.13)")
        draft = request_for(self.spec, requested or "latest")
        progress(f"resolving torch {requested or 'latest'} …")
        try:
            version = resolve_torch_version(draft, requested, self.root, self.installer)
        except EnvironmentFailed as error:
            cached = self._newest_cached(draft, requested)
            if cached is None:
                raise
            progress(f"{error}; using the newest cached match, torch {cached}")
            return request_for(self.spec, cached)
        progress(f"torch {requested or 'latest'} is {version}")
        return request_for(self.spec, version)

    def _newest_cached(self, draft: EnvRequest, requested: str | None) -> str | None:
        """Offline fallback: the newest complete env that fits the request."""
        versions = []
        for env in list_envs(self.root):
            request = (env.marker or {}).get("request")
            if isinstance(request, dict) and draft.matches_apart_from_torch(request):
                versions.append(str(request.get("torch")))
        return pick_newest(versions, requested)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        self.prepare(progress)
        assert self.env is not None
        try:
            sandbox = Sandbox.from_options(self.spec.options)
            return run_probe_subprocess(
                str(self.env.python_executable),
                jobs,
                progress,
                env=ISOLATING_ENV,
                sandbox=sandbox,
                scheduling=self.scheduling,
            )
        except EnvironmentUnusable as error:
            mark_broken(self.env.path, f"marked broken after a failed run: {error}")
            raise EnvironmentUnusable(f"{error} (env {self.env.key} is rebuilt on next use)") from None

    def host_interpreter(self) -> HostInterpreter | None:
        if self.env is None:
            return None
        return HostInterpreter(str(self.env.python_executable), ISOLATING_ENV, self.spec.options)

    def describe(self) -> dict[str, object]:
        facts = super().describe()
        if self.env is not None:
            marker = self.env.marker or {}
            facts.update(
                env_key=self.env.key,
                env_path=str(self.env.path),
                torch=marker.get("torch"),
                python=marker.get("python"),
                installer=marker.get("installer"),
            )
        return facts
