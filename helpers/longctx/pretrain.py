"""The YaRN lesson's base model: a small Qwen3-shaped model pretrained here, so that its trained range is known.
`pretrain()` trains it from scratch on the corpus at a short length (a real TRL SFTTrainer run on raw text windows), so
every position it has seen is below that length."""

import json
import math
import time
from pathlib import Path

from longctx import files
from longctx.errors import SEED_LIMIT, LongctxError
from longctx.models import from_pretrained, torch_dtype
from longctx.paths import data_dir, miniature, user_path

# the lesson's base model: small, RoPE base 100, trained at 128 tokens
BASE = dict(
    preset="small", rope_theta=100.0, seq_len=128, steps=1000, batch=32, learning_rate=3e-3, warmup_steps=100, seed=0,
    retrieval=0.0,  # the share of training windows that are pass-key documents (levers/passkey.py)
    answer_only=False,  # pass-key documents teach only their answer: the loss on the key's tokens, not the filler
    scheduler="cosine", init="",  # init: a model folder to go on training (its preset and RoPE base are kept)
)  # fmt: skip
SAID = {"warmup_steps": "default 100, or a tenth of --steps when that is fewer"}  # defaults that depend on another
SCHEDULERS = ("cosine", "constant")
# each option's range, checked before a model is built
RANGES = dict(seq_len=(2, 2**20), steps=(1, 10**7), batch=(1, 2**16), warmup_steps=(0, 10**7), seed=(0, SEED_LIMIT - 1),
              learning_rate=(1e-12, 1), rope_theta=(1 + 1e-9, 1e12), retrieval=(0, 1))  # fmt: skip


def checkpoint_dir() -> Path:
    return miniature("base")


def retrieval_dir() -> Path:
    """The miniature taught to copy a pass key (the retrieval probe's, lesson 02): the base model trained on
    pass-key documents, its manifest holding each stage's command."""
    return miniature("retrieval")


def pretrain(out: str | Path | None = None, *, progress: bool = True, force: bool = False, **options) -> Path:
    """Train the base model (BASE's values, `options` overriding any) and write its weights, config, tokenizer,
    manifest.json and checksums.json into `out`."""
    from longctx import data, models

    if unknown := sorted(set(options) - set(BASE)):
        raise TypeError(f"pretrain() takes the options {', '.join(BASE)}, not {', '.join(unknown)}")
    p = {**BASE, **options}  # in the order of BASE
    if "warmup_steps" not in options:  # a short run warms up for a tenth of it (the committed models: 100 of 1000)
        p["warmup_steps"] = min(BASE["warmup_steps"], p["steps"] // 10)
    # every option in range, named by its flag, before a model is built (argparse read the types; scheduler's choices)
    if models.preset(p["preset"]).config.get("vocab_size") != data.VOCAB_SIZE:
        cpu = [name for name, preset in models.PRESETS.items() if preset.config.get("vocab_size") == data.VOCAB_SIZE]
        raise LongctxError(
            f"--preset {p['preset']}: pretraining runs on this machine's CPU over the corpus's "
            f"{data.VOCAB_SIZE}-token BPE; use one of {', '.join(cpu)}."
        )
    for name, (low, high) in RANGES.items():  # (a window of one token has nothing to predict; AdamW moves each weight
        if not low <= p[name] <= high:  # by about the rate a step: past 1 they overflow; RoPE's base: models.ROPE_BASE_WHY)
            raise LongctxError(f"--{name.replace('_', '-')} must be from {low:g} to {high:g}, got {p[name]!r}.")
    if p["warmup_steps"] >= p["steps"]:  # every step would train at a fraction of the rate: a model barely trained
        raise LongctxError(f"--warmup-steps must be below --steps ({p['steps']:,}), or the model is barely trained.")
    if p["answer_only"] and not p["retrieval"]:
        raise LongctxError("--answer-only labels the pass-key documents' answers: give --retrieval a share above 0.")
    before = None  # the manifest of the model training goes on from
    if p["init"]:
        if kept := sorted({"preset", "rope_theta"} & set(options)):
            flags = " and ".join(f"--{k.replace('_', '-')}" for k in kept)
            raise LongctxError(f"--init {p['init']} goes on training that model, with its own {flags}: drop {flags}.")
        before = manifest(user_path(p["init"], "--init"))
        p["preset"], p["rope_theta"] = before["params"]["preset"], before["params"]["rope_theta"]
    if out is not None and user_path(out, "--out").resolve() == data_dir().resolve():
        raise LongctxError(f"{out} is the data folder itself (its manifest.json would be replaced): use e.g. --out data/my-base.")
    model_files = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    own = dict.fromkeys([*model_files, "manifest.json", data.CHECKSUMS], False)
    out = files.claim(out or checkpoint_dir(), command="pretrain", own=own, force=force, replace=False, write=False)
    if before is None:
        rope = {"rope_type": "default", "rope_theta": float(p["rope_theta"])}
        model = models.load(p["preset"], seed=p["seed"], rope_parameters=rope, max_position_embeddings=p["seq_len"])
    else:
        model = load_base(p["init"]).train()
    trained = max(p["seq_len"], before["trained_length"] if before else 0)  # the longest position it has seen
    dataset = data.long_sequences(p["seq_len"], p["steps"] * p["batch"], seed=p["seed"])  # random windows of the training books
    if p["retrieval"]:
        dataset = _with_pass_keys(dataset, p["retrieval"], p["seq_len"], p["seed"], answer_only=p["answer_only"])
    from trl import SFTConfig, SFTTrainer

    from longctx import quiet
    from longctx.train import on_this_machine, result_of

    with files.staging(out) as tmp:
        args = SFTConfig(
            output_dir=str(Path(tmp) / "run"), max_steps=p["steps"], per_device_train_batch_size=p["batch"],
            learning_rate=p["learning_rate"], seed=p["seed"], lr_scheduler_type=p["scheduler"],
            warmup_steps=p["warmup_steps"], logging_steps=max(1, p["steps"] // 20), max_length=p["seq_len"],
            activation_checkpointing=False, save_strategy="no", **on_this_machine() | {"disable_tqdm": not progress},
        )  # fmt: skip
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=data.tokenizer())
        quiet.no_log_printing(trainer)
        start = time.perf_counter()
        steps = trainer.train().global_step
        result = result_of(trainer, time.perf_counter() - start, steps)
        finite = all(w.isfinite().all() for w in model.parameters())  # a loss can look sane while weights overflow
        if not finite or not result.losses or not all(math.isfinite(x) and x > 0 for x in result.losses):
            # a cross-entropy of exactly 0 on real text means the trainer logged a NaN step as 0
            went = "its weights overflowed to NaN or infinity" if not finite else "a loss logged as 0.0 is a NaN step"
            started = f" or train from another model than --init {p['init']}" if p["init"] else " or check --rope-theta"
            raise LongctxError(
                f"Training diverged (logged losses {result.losses[:5]}…: {went}); nothing was written to {out}. "
                f"Lower --learning-rate{started}."
            )
        staged = Path(tmp) / "model"
        model.save_pretrained(staged, safe_serialization=True)
        data.tokenizer().save_pretrained(staged)
        written = {
            "params": p,
            "trained_length": trained,
            "final_loss": result.losses[-1],
            "losses": result.losses,
            "seconds": result.seconds,
            "command": _command(p, options),
            "params_count": models.n_params(model),
            "created": time.strftime("%Y-%m-%d"),
        }
        if before is not None:
            written["init"] = before  # the whole history: each stage's parameters and command
        (staged / "manifest.json").write_text(json.dumps(written, indent=2))
        data.write_checksums(staged)
        files.place(staged, out, "pretrain")  # the training run's folder goes with the temporary one
    return out


def _command(p: dict, options: dict) -> str:
    """The command that trains this model again: every option, a switch as its flag, an init's kept ones left out."""
    words = ["longctx pretrain"]
    for k, v in p.items():
        flag = f"--{k.replace('_', '-')}"
        if isinstance(v, bool):
            words += [flag] if v else []
        elif not (k == "init" and not v) and not (p["init"] and k in ("preset", "rope_theta")):
            words += [flag, str(v)]
    return " ".join(words)


def _with_pass_keys(dataset, share: float, length: int, seed: int, *, answer_only: bool = False):
    """`dataset` with `share` of its windows made pass-key documents, each on its own window as filler, the key at a
    random depth (the probe's documents, from the training books)."""
    import numpy as np
    from datasets import Dataset

    from longctx import data, passkey

    rng, rows, tok = np.random.default_rng(seed), list(dataset["input_ids"]), data.tokenizer()
    labels = [list(r) for r in rows]
    for i in rng.choice(len(rows), round(share * len(rows)), replace=False):
        doc = passkey.document(rows[i], tok, passkey.key_text(rng), float(rng.uniform()), length)
        rows[i], labels[i] = doc.input_ids, passkey.answer_labels(doc) if answer_only else doc.input_ids
    return Dataset.from_dict({"input_ids": rows} | ({"labels": labels} if answer_only else {}))


def load_base(path: str | Path | None = None, *, wanted: int | None = None, **yarn):
    """The pretrained base model; with `wanted`, YaRN (rope.with_yarn's `factor`, `beta_fast`) for wanted / trained."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from longctx.levers import rope

    path = Path(path or checkpoint_dir())
    trained = trained_length(path)  # first: a missing model is named with the command that builds it
    cfg = from_pretrained(AutoConfig, path)
    if wanted is not None:
        cfg = rope.with_yarn(cfg, trained, wanted, **yarn)
    return from_pretrained(AutoModelForCausalLM, path, config=cfg, dtype=torch_dtype("fp32")).eval()


def manifest(path: str | Path | None = None) -> dict:
    """The base model's manifest.json (its parameters, losses and the command that built it)."""
    path = Path(path or checkpoint_dir())
    loaded = files.json_object(path / "manifest.json")
    if not (loaded and isinstance(loaded.get("params"), dict) and "trained_length" in loaded):
        raise LongctxError(
            f"No model trained by `longctx pretrain` at {path} (its manifest.json is missing or damaged): the repository "
            "ships one in data/yarn-base (check LONGCTX_DATA, which moves data/; `git checkout data/` restores it), or "
            "build one with `longctx pretrain --out DIR`."
        )
    return loaded


def trained_length(path: str | Path | None = None) -> int:
    return manifest(path)["trained_length"]
