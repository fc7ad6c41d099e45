"""Documents of different lengths in one batch: padded to the batch's longest (TRL's default), padding-free (one row,
`position_ids` restarting at each document) or packed (`packing=True`: documents binned best-fit-decreasing into rows of
`max_length`, padding-free within each row). transformers builds the block-diagonal mask from those `position_ids`
(`masking_utils.find_packed_sequence_indices`, when no cache is passed), so packed documents do not see each other."""

import re

import numpy as np

from longctx.errors import LongctxError


def paragraphs(tokenizer, *, n: int, min_tokens: int, max_length: int, split: str = "train", seed: int = 0):
    """`n` paragraphs of the corpus's books (split at blank lines), drawn at random, each `min_tokens` long or more and
    cut at `max_length`: documents with the corpus's own length distribution, many short and a long tail."""
    from datasets import Dataset

    from longctx import data

    texts = [p.strip() for book in data.books(split) for p in re.split(r"\n[ \t]*\n", book.text) if p.strip()]
    rng = np.random.default_rng(seed)
    chosen = []
    for i in rng.permutation(len(texts)):
        ids = tokenizer(texts[i])["input_ids"]
        if len(ids) >= min_tokens:
            chosen.append(ids[:max_length])
            if len(chosen) == n:
                return Dataset.from_dict({"input_ids": chosen})
    raise LongctxError(f"the {split} books hold {len(chosen)} paragraphs of {min_tokens}+ tokens, fewer than {n}.")


def padding_waste(lengths, batch_size: int, *, seed: int = 0) -> float:
    """The share of positions that are padding when documents of `lengths`, in a random order, are batched
    `batch_size` at a time and each batch padded to its longest (the last, short batch dropped)."""
    order = np.random.default_rng(seed).permutation(np.asarray(lengths))
    batches = order[: len(order) // batch_size * batch_size].reshape(-1, batch_size)
    return float(1 - batches.sum() / (batches.max(axis=1) * batch_size).sum())


def token_losses(model, input_ids, position_ids=None):
    """The loss of each next-token prediction of one row (a float tensor one shorter than the row), the model told where
    each document starts by `position_ids` (None: one document; no cache, so transformers builds the packed mask)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=input_ids[None], position_ids=position_ids, use_cache=False).logits[0]
    return torch.nn.functional.cross_entropy(logits[:-1].float(), input_ids[1:], reduction="none")
