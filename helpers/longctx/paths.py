"""Where things live: the repository root, data/ and build/ (overridable by environment variables)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _folder(variable: str, default: Path) -> Path:
    """The folder an environment variable names (an empty one counts as unset), created if missing."""
    from .errors import LongctxError

    path = Path(os.environ.get(variable) or default).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LongctxError(f"{variable}={path} cannot be used as a folder ({exc.strerror}); point it at a folder "
                           "(or unset it).") from None
    return path


def data_dir() -> Path:
    """Fetched and built artefacts (corpus, tokenizer, checkpoints). LONGCTX_DATA overrides."""
    return _folder("LONGCTX_DATA", REPO / "data")


def build_dir() -> Path:
    """Executed notebooks, results and figures. LONGCTX_BUILD overrides."""
    return _folder("LONGCTX_BUILD", REPO / "build")


def notebooks_dir() -> Path:
    return REPO / "notebooks"
