"""The `venv` runner: a managed virtual environment per (python, torch, CUDA, index, pins)."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Mapping
from pathlib import Path

from casekit.errors import EnvironmentFailed
from casekit.runners.interface import (
    ProbeBatchResult,
    ProbeJob,
    ProbeScheduling,
    ProbeSession,
    ProgressFn,
    Runner,
    ScriptEntry,
    TargetSpec,
)
from casekit.runners.process import EnvironmentUnusable
from casekit.runners.sandbox import BWRAP_ALLOW_EXAMPLES, KNOWN_OPTIONS, Sandbox
from casekit.runners.torch_source.index import IndexUnreachable, read_listing
from casekit.runners.torch_source.pick import nightly_range
from casekit.runners.torch_source.request import Channel
from casekit.runners.torch_source.source import choose_source
from casekit.runners.warm import WarmSession
from casekit.runners.venv.cache import CachedEnv, EnvRequest, mark_broken, why_not_ready
from casekit.runners.venv.install import ISOLATING_ENV, choose_installer, ensure_env, python_version_of
from casekit.runners.venv.resolve import MIRROR_HINT, IndexSeams, resolve_request
from casekit.settings import cache_root


class VenvRunner(Runner):
    """A managed, cached virtual environment with the requested torch (and pins)."""

    name = "venv"
    builds_envs = True
    pins_libraries = True
    sandbox_name = "bubblewrap"
    allow_options = frozenset(KNOWN_OPTIONS)
    allow_examples = BWRAP_ALLOW_EXAMPLES
    channels = frozenset(Channel)

    def __init__(
        self,
        spec: TargetSpec,
        cache_dir: Path | None = None,
        installer: str | None = None,
        index_seams: IndexSeams | None = None,
    ) -> None:
        super().__init__(spec)
        self.root = cache_dir or cache_root()
        self._installer = installer
        self.index_seams = index_seams
        self.env: CachedEnv | None = None

    @property
    def installer(self) -> str:
        """'uv' or 'pip', decided on first use (finding out whether uv runs starts it)."""
        if self._installer is None:
            self._installer = choose_installer()
        return self._installer

    @classmethod
    def free_build_bytes(cls) -> int | None:
        """Free bytes on the disk of the env cache (or its nearest existing parent, before the first build)."""
        folder = cache_root()
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        return shutil.disk_usage(folder).free

    @classmethod
    def nightlies_between(cls, spec: TargetSpec, good: dt.date, bad: dt.date) -> tuple[list[str], list[str]]:
        """The nightlies from `good` to `bad` in the channel's index for this variant, for this interpreter."""
        source = choose_source(Channel.NIGHTLY, spec.cuda, index_url=spec.index_url, find_links=spec.find_links)
        assert source.index_url is not None
        try:
            listing = read_listing(source.index_url, links=source.links)
        except IndexUnreachable as error:
            raise EnvironmentFailed(f"{error} ({MIRROR_HINT})") from None
        builds, notes = nightly_range(listing.installable(python_version_of(spec.python)), good, bad)
        return [build.public for build in builds], [*([source.note] if source.note else []), *notes]

    def prepare(self, progress: ProgressFn) -> None:
        """Resolve the torch version, then reuse or build the env."""
        if self.env is not None and why_not_ready(self.env.path) is None:
            return
        self.env = ensure_env(self._request(progress), self.root, progress, self.installer)

    def _request(self, progress: ProgressFn) -> EnvRequest:
        return resolve_request(self.spec, self.root, self.installer, progress, self.index_seams)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """One batch in a session of its own (one torch import)."""
        self.prepare(progress)
        with self._session(None, self.scheduling, None) as session:
            return session.run_probe(jobs, progress)

    def open_session(
        self,
        entry: ScriptEntry,
        *,
        scheduling: ProbeScheduling | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProbeSession:
        """One warm probe in the managed env, in the runner's sandbox, for every batch of `entry`."""
        return self._session(entry, scheduling or self.scheduling, env)

    def _session(
        self, entry: ScriptEntry | None, scheduling: ProbeScheduling | None, env: Mapping[str, str] | None
    ) -> ProbeSession:
        if self.env is None:
            raise EnvironmentFailed("internal: a venv session before prepare()")
        return _VenvSession(self.env, entry, Sandbox.from_options(self.spec.options), {**ISOLATING_ENV, **(env or {})}, scheduling)

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
                torch_file=marker.get("torch_file"),
                channel=self.spec.channel.value,
            )
        return facts


class _VenvSession(WarmSession):
    """A warm session in a managed env: an env whose torch does not import is marked broken (rebuilt on
    next use)."""

    def __init__(
        self,
        env: CachedEnv,
        entry: ScriptEntry | None,
        sandbox: Sandbox,
        variables: Mapping[str, str],
        scheduling: ProbeScheduling | None,
    ) -> None:
        super().__init__(str(env.python_executable), entry, sandbox, variables, scheduling)
        self.cached = env

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        try:
            return super().run_probe(jobs, progress)
        except EnvironmentUnusable as error:
            mark_broken(self.cached.path, f"marked broken after a failed run: {error}")
            raise EnvironmentUnusable(f"{error} (env {self.cached.key} is rebuilt on next use)") from None
