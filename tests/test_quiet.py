"""The switches `longctx.quiet` and `longctx lab` set are the libraries' own: each test fails when an upstream
release renames or drops one (the executed notebooks are checked for noise in test_notebooks.py)."""

import importlib.util
import inspect
import json
import logging
import warnings

import pytest

from longctx import quiet
from longctx.tools import lab


def test_for_lessons_turns_the_libraries_own_switches():
    import datasets
    import transformers

    quiet.for_lessons()
    assert transformers.logging.get_verbosity() == logging.ERROR
    assert not transformers.utils.logging.is_progress_bar_enabled()
    assert datasets.logging.get_verbosity() == logging.ERROR
    assert not datasets.is_progress_bar_enabled()
    assert all(logging.getLogger(name).level == logging.ERROR for name in quiet.LOGGERS)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        quiet.for_lessons()  # the filters go in front of the default one just set
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning)
        warnings.warn("a warning that matters", UserWarning)
    assert [str(w.message) for w in seen] == ["a warning that matters"]


def test_the_silenced_deprecation_is_still_trls_call():
    # trl 1.16 calls the deprecated name inside its own code; when it moves to activation_checkpointing, the
    # filter in quiet.UPSTREAM_WARNINGS can go
    import trl.models.utils

    assert "is_gradient_checkpointing" in inspect.getsource(trl.models.utils)


def test_the_trainer_keeps_its_log_without_printing_it(capsys):
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    class Trainer:  # the one method of transformers.Trainer that no_log_printing uses
        def __init__(self):
            self.callbacks = [PrinterCallback(), TrainerCallback()]

        def remove_callback(self, cls):
            self.callbacks = [c for c in self.callbacks if not isinstance(c, cls)]

    trainer = Trainer()
    quiet.no_log_printing(trainer)
    assert [type(c) for c in trainer.callbacks] == [TrainerCallback]


def test_the_kernel_log_level_is_an_ipykernel_option():
    from ipykernel.kernelapp import IPKernelApp

    assert "log_level" in IPKernelApp.class_trait_names()
    assert quiet.KERNEL_ARGUMENTS == ["--IPKernelApp.log_level=CRITICAL"]


def test_lab_settings_go_into_longctx_own_file(tmp_path):
    path = lab.write_settings(tmp_path)
    assert path == tmp_path / "share/jupyter/lab/settings/overrides.d/longctx.json"
    assert json.loads(path.read_text()) == lab.SETTINGS
    before = path.stat().st_mtime_ns
    lab.write_settings(tmp_path)
    assert path.stat().st_mtime_ns == before  # unchanged: not rewritten
    cmd = lab.command(tmp_path)
    assert cmd[1:3] == ["-m", "jupyterlab"] and f"--ServerApp.root_dir={tmp_path.resolve()}" in cmd


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None, reason="JupyterLab is the lab extra")
def test_lab_settings_name_settings_the_installed_jupyterlab_has():
    import sys
    from pathlib import Path

    for plugin, values in lab.SETTINGS.items():
        package, name = plugin.split(":")
        schema = Path(sys.prefix) / "share/jupyter/lab/schemas" / package / f"{name}.json"
        properties = json.loads(schema.read_text())["properties"]
        assert set(values) <= set(properties)


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is not None, reason="JupyterLab is installed here")
def test_lab_without_jupyterlab_names_the_install(capsys):
    from longctx.tools.cli import main

    assert main(["lab"]) == 2
    assert "pip install -e '.[lab]'" in capsys.readouterr().err
