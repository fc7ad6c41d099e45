"""A lesson shows its own output and the warnings that matter, not the libraries' chatter: each switch here is the
library's own (a log level, a progress-bar switch, an environment variable), set only here. `for_lessons()` runs in
`notebook.start`, in the context-parallel workers and, through `KERNEL_ARGUMENTS`, in the harness's kernels."""

import logging
import os
import warnings

# read when the libraries load (a reader's own setting wins); tokenizers warns "process just got forked" otherwise
ENVIRONMENT = {"TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error", "DATASETS_VERBOSITY": "error"}

# Python loggers of libraries whose info and warnings a lesson does not teach (errors still show)
LOGGERS = ("transformers", "datasets", "accelerate", "trl", "DeepSpeed", "torch.distributed.elastic")

# Upstream deprecations a lesson cannot act on (the call is inside the library), each with the version that emits it.
UPSTREAM_WARNINGS = (
    # trl 1.16 (trl/models/utils.py) calls gradient_checkpointing*, which transformers 5.24 deprecated for activation_*
    (FutureWarning, r"`(is_)?gradient_checkpointing\w*` is deprecated"),
)

# ipykernel's own log is about its plumbing, never the notebook's code: at WARNING it prints "running over TCP
# without encryption" each run, and after Ctrl-C a traceback of its reply to a closed socket
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def for_lessons() -> None:
    """The libraries' loggers at ERROR, their progress bars off (the lesson's stay), the deprecations above hidden."""
    import torch

    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    if not torch.accelerator.is_available():  # DeepSpeed warns "Setting accelerator to CPU ..." when it has to guess
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
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
    """Keep the trainer's log (state.log_history) without PrinterCallback printing each entry when the bar is off."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
