"""Moved to casekit.runners.docker.images; this name is kept for callers not yet updated (the CLI)."""

from casekit.runners.docker.images import (
    ImageRecipe,
    ImageRecord,
    build_image,
    connect,
    ensure_image,
    find_image,
    list_images,
    prune_images,
    recipe_for,
)

__all__ = [
    "ImageRecipe",
    "ImageRecord",
    "build_image",
    "connect",
    "ensure_image",
    "find_image",
    "list_images",
    "prune_images",
    "recipe_for",
]
