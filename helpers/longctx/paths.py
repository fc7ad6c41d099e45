"""Where things live: the repository root, data/ and build/ (overridable by environment variables)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """Fetched and built artefacts (corpus, tokenizer, checkpoints). LONGCTX_DATA overrides."""
    path = Path(os.environ.get("LONGCTX_DATA", REPO / "data"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_dir() -> Path:
    """Executed notebooks, results and figures. LONGCTX_BUILD overrides."""
    path = Path(os.environ.get("LONGCTX_BUILD", REPO / "build"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def notebooks_dir() -> Path:
    return REPO / "notebooks"
