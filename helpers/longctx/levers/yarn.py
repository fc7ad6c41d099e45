"""The YaRN lesson's measurements: models loaded with or without YaRN (the pretrained base, `base_model`, or a hub /
local model), text windows, and per-token loss along a sequence (statistics of it: `curves`)."""

import contextlib
import gc

import numpy as np
import torch

from longctx import models, pretrain
from longctx.errors import LongctxError
from longctx.paths import MINIATURES, miniature


@torch.no_grad()
def _token_losses(model, dataset, batch: int, progress: bool, desc: str):
    """Negative log-likelihood of every next token, one (windows, positions - 1) block per forward pass, from TRL's
    fused head, which returns per-token log-probs without materialising the logits."""
    from tqdm.auto import tqdm
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=("log_probs",))
    ids = torch.tensor(dataset["input_ids"], device=next(model.parameters()).device)
    for chunk in tqdm(ids.split(batch), desc=desc, disable=not progress, leave=False):
        yield -model(input_ids=chunk, labels=chunk, fused_lm_head=True, use_cache=False).log_probs.double().cpu()


def per_token_loss(model, dataset, *, batch: int = 8, progress: bool = True) -> np.ndarray:
    """Mean negative log-likelihood at each position (predicting token t+1 from tokens ≤ t) over `dataset`."""
    total = sum(nll.sum(0) for nll in _token_losses(model, dataset, batch, progress, "per-token loss"))
    return (total / len(dataset)).numpy()


def window_losses(model, dataset, *, batch: int = 8, progress: bool = True, positions=slice(None)) -> np.ndarray:
    """Mean loss of each sequence of `dataset` (what a trainer's first step reports, window by window), over the
    predicted `positions` (a slice: lesson 10 scores the last stretch of each window apart)."""
    losses = _token_losses(model, dataset, batch, progress, "window losses")
    return torch.cat([nll[:, positions].mean(1) for nll in losses]).numpy()


def load_model(spec: str, *, trained=None, wanted=None, beta_fast=None, dtype: str = "fp32"):
    """ "base" → the lesson's pretrained model, "retrieval" → the one taught to copy a pass key; a hub id or path → that
    model (its `trained` length given) in `dtype`, on this machine's accelerator."""
    from longctx.levers import rope

    if spec in MINIATURES:
        return pretrain.load_base(miniature(spec), wanted=wanted, beta_fast=beta_fast)
    if not trained:
        raise LongctxError(f"{spec}: give its trained length (TRAINED_LENGTH) to place the YaRN rescaling.")
    cfg = models.config(spec)
    if wanted is not None:
        cfg = rope.with_yarn(cfg, trained, wanted, beta_fast=beta_fast)
    return models.to_device(models.load(spec, config=cfg, dtype=dtype).eval())


@contextlib.contextmanager
def parked(*models):
    """Keep `models` in host memory for the block and put them back on their device afterwards, so a fine-tune on
    the GPU has the memory the evaluation copies held."""
    homes = [next(m.parameters()).device for m in models]
    for m in models:
        m.to("cpu")
    try:
        gc.collect()
        torch.cuda.empty_cache()  # a no-op without CUDA
        yield
    finally:
        gc.collect()
        torch.cuda.empty_cache()
        for m, home in zip(models, homes):
            m.to(home)


def tokenizer_for(spec: str):
    """The model's tokenizer: the corpus BPE for "base" (trained on its ids), a hub id's or model folder's own."""
    from longctx import data

    return data.tokenizer() if spec in MINIATURES else data.tokenizer_for(spec)


def text_windows(length: int, n: int, *, dataset: str, tokenizer=None, held_out: bool = True, seed: int = 0):
    """`n` windows of `length` tokens of held-out text (the corpus's validation books, a `datasets` source's test
    split) or, with held_out=False, training text. `tokenizer` None: the corpus BPE."""
    from longctx import data

    return data.long_sequences(length, n, "validation" if held_out else "train", dataset=dataset, tokenizer=tokenizer, seed=seed)
