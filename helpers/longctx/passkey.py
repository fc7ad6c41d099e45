"""A retrieval probe: a pass key of five digits hidden at a chosen depth of filler text, asked for at the end.
Exact-match accuracy by depth and length says whether a model uses its context, which a per-token loss averaged over the
sequence cannot (the YaRN, LongLoRA and ProLong papers report this probe)."""

from dataclasses import dataclass

import numpy as np

from longctx.errors import LongctxError

DIGITS = "123456789"  # " 0" is two tokens in the corpus BPE; each of " 1" ... " 9" is one
KEY_LENGTH = 5
# " *", rare in the books, marks where the key starts: after it, the first digit is a copy of what followed it before
NEEDLE = " The pass key is *{key}. Remember it."
QUESTION = " What is the pass key? The pass key is *"


@dataclass(frozen=True)
class Document:
    input_ids: list[int]
    answer: range  # positions of the key's tokens after the question, what the model must predict
    depth: float  # where the needle starts, as a share of the filler
    length: int


def key_text(rng: np.random.Generator) -> str:
    return "".join(f" {d}" for d in rng.choice(list(DIGITS), KEY_LENGTH))


def document(filler: list[int], tok, key: str, depth: float, length: int) -> Document:
    """`length` tokens: filler, the needle at `depth` of it, more filler, the question and the key's tokens, a full
    stop. Token ids are joined as tokenized apart, the same way in training and in the probe."""
    needle, question = tok.encode(NEEDLE.format(key=key)), tok.encode(QUESTION)
    answer, stop = tok.encode(key), tok.encode(".")
    room = length - len(needle) - len(question) - len(answer) - len(stop)  # tokens of filler
    if room < 1 or len(filler) < room:
        raise LongctxError(f"{length} tokens leave no room for filler around the pass key: use a longer document.")
    at = round(depth * room)
    ids = list(filler[:at]) + needle + list(filler[at:room]) + question + answer + stop
    end = len(ids) - len(stop)
    return Document(ids, range(end - len(answer), end), depth, length)


def answer_labels(doc: Document) -> list[int]:
    """Labels that teach only the answer: the key's tokens, -100 (no loss) on the filler, the needle and the question."""
    return [t if at in doc.answer else -100 for at, t in enumerate(doc.input_ids)]


def documents(length: int, depths, n: int, *, tokenizer, dataset: str = "corpus", split="validation", seed=0):
    """`n` documents at each depth, `length` tokens each: filler from `split` of `dataset` (held-out books by default),
    a fresh key each."""
    from longctx import data

    rng = np.random.default_rng(seed)
    fillers = data.long_sequences(length, n * len(depths), split, dataset=dataset, tokenizer=tokenizer, seed=seed)
    rows = iter(fillers["input_ids"])
    return [document(next(rows), tokenizer, key_text(rng), float(d), length) for d in depths for _ in range(n)]


def correct(model, docs: list[Document], *, batch: int = 8) -> np.ndarray:
    """For each document, whether greedy decoding after the question gives the key: every key token the argmax of the
    logits before it (teacher-forced, which is the same as greedy when all are right), from one forward pass that keeps
    only the last positions' logits."""
    import torch

    device = next(model.parameters()).device
    hits = []
    for start in range(0, len(docs), batch):
        chunk = docs[start : start + batch]
        if len({len(d.input_ids) for d in chunk}) != 1:
            raise LongctxError("a batch of pass-key documents must share one length.")
        ids = torch.tensor([d.input_ids for d in chunk], device=device)
        keep = len(ids[0]) - chunk[0].answer.start + 1  # the logits that predict each key token
        with torch.no_grad():
            logits = model(input_ids=ids, logits_to_keep=keep, use_cache=False).logits
        offset = len(ids[0]) - keep
        for row, d in enumerate(chunk):
            predicted = logits[row, [p - 1 - offset for p in d.answer]].argmax(-1)
            hits.append(bool((predicted == ids[row, list(d.answer)]).all()))
    return np.array(hits)


def heatmap(model, lengths, depths, n: int, *, tokenizer, batch: int = 8, seed: int = 0, **source) -> np.ndarray:
    """Keys found out of `n` documents, a row per depth and a column per length (the same documents for every model
    given the same arguments)."""
    grid = np.zeros((len(depths), len(lengths)), dtype=int)
    for j, length in enumerate(lengths):
        docs = documents(length, depths, n, tokenizer=tokenizer, seed=seed + j, **source)
        grid[:, j] = correct(model, docs, batch=batch).reshape(len(depths), n).sum(axis=1)
    return grid


def interval(found: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of an accuracy of `found` out of `n`: the range of true accuracies that
    `level` of such probes would cover. scipy's binomtest."""
    from scipy.stats import binomtest

    ci = binomtest(int(found), int(n)).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)
