"""The venv runner: managed, cached virtual environments (`cache`), built by uv or pip (`install`), run (`runner`)."""

from casekit.runners.venv.cache import (
    MARKER,
    CachedEnv,
    EnvRequest,
    envs_dir,
    list_envs,
    remove_env,
    why_not_ready,
)
from casekit.runners.venv.install import ISOLATING_ENV, choose_installer, ensure_env, request_for
from casekit.runners.venv.runner import VenvRunner

__all__ = [
    "ISOLATING_ENV",
    "MARKER",
    "CachedEnv",
    "EnvRequest",
    "VenvRunner",
    "choose_installer",
    "ensure_env",
    "envs_dir",
    "list_envs",
    "remove_env",
    "request_for",
    "why_not_ready",
]
