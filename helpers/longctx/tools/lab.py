"""`longctx lab`: JupyterLab on the lessons with no pop-up about Jupyter news, no update check, and the environment's
own kernel as default. The settings go into longctx's own file under the environment's JupyterLab `settings/overrides.d/`
(read after JupyterLab's defaults, before the user's choices), so no setting of theirs is touched."""

import json
import os
import sys
from pathlib import Path

from longctx.files import atomic

# @jupyterlab/apputils-extension:notification (JupyterLab 4): with fetchNews left at "none" the first start
# asks "Would you like to get notified about official Jupyter news?"; "false" answers it as no
SETTINGS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
SERVER_FLAGS = [
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--MappingKernelManager.default_kernel_name=python3",
]


def settings_file(prefix: str | Path = sys.prefix) -> Path:
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "longctx.json"


def write_settings(prefix: str | Path = sys.prefix) -> Path:
    """The overrides above, in longctx's own file (written atomically; rewritten only when it differs)."""
    path, text = settings_file(prefix), json.dumps(SETTINGS, indent=2) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic(path) as tmp:
            tmp.write_text(text)
    return path


def command(root: str | Path, *extra: str) -> list[str]:
    """The JupyterLab command line for the notebooks under `root`."""
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    return [sys.executable, "-m", "jupyterlab", *SERVER_FLAGS, f"--ServerApp.root_dir={Path(root).resolve()}", *as_root, *extra]
