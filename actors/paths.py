"""Where a path lies relative to a folder. Pure (no file system access)."""

from __future__ import annotations

import os

__all__ = ["inside"]


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` itself or lies below it, compared lexically: both
    should be absolute and normalized (``realpath`` them first to follow links)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
