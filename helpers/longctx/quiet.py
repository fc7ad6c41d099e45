"""What a lesson shows: its own lines, tables, figures and progress bars, and the warnings that matter to a
learner; not the libraries' chatter around them. Each switch below is the library's own (its logging level,
its progress-bar switch, the environment variable it reads), and this module is the one place that sets
them. Errors always show, and so does every warning not named here.

`for_lessons()` runs in `notebook.start` (the first thing each lesson does), in the context-parallel
workers, and, through `KERNEL_ARGUMENTS`, in the kernels the harness starts."""

from __future__ import annotations

import logging
import os
import warnings

# read by the libraries when they load or first log: set before they do (os.environ.setdefault: a reader's
# own setting wins)
ENVIRONMENT = {
    "TOKENIZERS_PARALLELISM": "false",  # tokenizers' "process just got forked" warning before each DataLoader
    "TRANSFORMERS_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
}

# Python loggers of libraries whose info and warnings a lesson does not teach (errors still show)
LOGGERS = ("transformers", "datasets", "accelerate", "trl", "DeepSpeed", "torch.distributed.elastic")

# Upstream deprecation warnings that a lesson cannot act on: the call is inside the library, not in code a
# learner writes or copies. Each names the version that emits it.
UPSTREAM_WARNINGS = (
    # trl 1.16 (trl/models/utils.py, GRPO's generation) calls the gradient_checkpointing* names that
    # transformers 5.24 deprecated in favour of activation_checkpointing*
    (FutureWarning, r"`(is_)?gradient_checkpointing\w*` is deprecated"),
)

# the kernels the harness starts: ipykernel's own log level. Its log is about the kernel's plumbing, never the
# notebook's code (a cell's error is an output of the notebook, and a dead kernel is reported by the harness):
# at WARNING it prints "running over TCP without encryption" once per run (a loopback kernel papermill starts
# and stops), and after Ctrl-C a traceback of its reply to a closed socket
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def for_lessons() -> None:
    """Quiet the libraries for a lesson run: their loggers at ERROR, their own progress bars off (the lesson's
    bars stay), the upstream deprecations above hidden. Safe to call more than once."""
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    if "DS_ACCELERATOR" not in os.environ and _no_accelerator():
        # DeepSpeed warns "Setting accelerator to CPU ... unable to detect it" when it has to guess
        os.environ["DS_ACCELERATOR"] = "cpu"
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for category, message in UPSTREAM_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    import datasets
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading weights", "Writing model shards"
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()  # SFTTrainer's "Building labels", "Truncating", "Dropping ..." maps


def no_log_printing(trainer) -> None:
    """A trainer that keeps its log (state.log_history, which the lessons plot and tabulate) without printing
    each entry: transformers' PrinterCallback prints every log dict when the progress bar is off."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def _no_accelerator() -> bool:
    import torch

    return not torch.accelerator.is_available()
