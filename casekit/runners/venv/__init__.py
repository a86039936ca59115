"""The venv runner: managed, cached virtual environments (`cache`), built by uv or pip (`install`), run (`runner`)."""

from casekit.runners.venv.cache import (
    MARKER,
    CachedEnv,
    EnvRequest,
    cache_root,
    envs_dir,
    list_envs,
    remove_env,
    why_not_ready,
)
from casekit.runners.venv.install import ISOLATING_ENV, choose_installer, ensure_env, request_for
from casekit.runners.venv.runner import VenvRunner
from casekit.versions import is_exact, pick_newest

__all__ = [
    "ISOLATING_ENV",
    "MARKER",
    "CachedEnv",
    "EnvRequest",
    "VenvRunner",
    "cache_root",
    "choose_installer",
    "ensure_env",
    "envs_dir",
    "is_exact",
    "list_envs",
    "pick_newest",
    "remove_env",
    "request_for",
    "why_not_ready",
]
