"""The practitioner's table (lesson 07): the longest sequence whose estimated training step fits one card, for each
model × card × lever set, from the fake-tensor estimator (`longctx.memory.estimate.reach`). Written to
calculator/reach.json, which is committed; lesson 07 prints it and tests/test_calculator.py checks cells of it against
fresh estimates. Run it again after a change to the estimator or to the libraries it traces:

    .venv/bin/python scripts/reach_table.py          # 38 minutes on 2 cores shared with other work
"""

import argparse
import json
from pathlib import Path

from tqdm.auto import tqdm

from longctx import children, models
from longctx.memory import cards
from longctx.notebook import versions

OUT = Path(__file__).resolve().parents[1] / "calculator" / "reach.json"
MODELS = ("qwen3-0.6b", "qwen3-4b", "qwen3-8b", "llama-3.1-8b")  # the last is ALST's model (models.LLAMA_3_1_8B)
CARDS = ("RTX-4090", "A100-40GB", "H100-80GB", "H200")  # 24, 40, 80 and 141 GB
# each set adds to the one before; the guide's levers are the estimator's chunked loss and checkpointing, plus offload;
# ALST's one-GPU set adds its host state and fused norm to the tiled MLP (not to CP, where FSDP2 shards the state)
LEVER_SETS = {
    "guide's levers": dict(offload=True),
    "+ tiled MLP": dict(offload=True, tiled_mlp=True),
    "+ CP×8": dict(offload=True, tiled_mlp=True, cp_size=8),
    "ALST, one GPU": dict(offload=True, tiled_mlp=True, offload_optimizer=True, offload_params=True, fused_norm=True),
}
MULTIPLE = {1: 8192, 8: 65536}  # the table's resolution in tokens, per GPU count


def spec(model: str):
    """What the estimator takes for a table's model name: a preset, or Llama-3.1-8B's published shapes."""
    from transformers import LlamaConfig

    return LlamaConfig(**models.LLAMA_3_1_8B) if model == "llama-3.1-8b" else model


def column(call: tuple) -> dict:
    """One model and lever set on every card, smallest first, each search reusing the estimates of the ones before."""
    from longctx.errors import LongctxError
    from longctx.memory.estimate import reach

    model, name = call
    levers, known, out = LEVER_SETS[name], {}, {}
    multiple = MULTIPLE[levers.get("cp_size", 1)]
    for card in CARDS:
        try:
            found = reach(spec(model), cards.capacity(card)[0], multiple=multiple, known=known, **levers)
            out[card] = {"seq_len": found["seq_len"], "peak_gib": round(found["peak_gib"], 4)}
        except LongctxError as exc:  # not even one multiple fits: the fixed state alone is over the card
            out[card] = {"error": str(exc)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    longest_first = sorted(LEVER_SETS, key=lambda name: -LEVER_SETS[name].get("cp_size", 1))  # CP×8's estimates first
    calls = [(m, name) for name in longest_first for m in MODELS]
    found = dict(zip(calls, children.pool_map(column, calls, args.workers, tqdm(total=len(calls), desc="reach columns"))))
    data = {
        "versions": versions(),
        "models": list(MODELS),
        "cards": {name: round(cards.capacity(name)[0], 4) for name in CARDS},
        "lever_sets": LEVER_SETS,
        "multiple": {str(k): v for k, v in MULTIPLE.items()},
        "reach": {m: {name: found[m, name] for name in LEVER_SETS} for m in MODELS},  # [model][lever set][card]
    }
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({len(calls)} columns)")


if __name__ == "__main__":
    main()
