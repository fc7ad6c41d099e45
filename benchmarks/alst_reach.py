"""Lesson 07's reach table: the longest sequence whose estimated step fits one H100-80GB, with the guide's levers
(chunked loss, checkpointing, offload) and with ALST's tiled MLP added, on one GPU and per rank of CP×8, for ALST's
model (Llama-3.1-8B) and Qwen3-8B, beside ALST's published 500K (one H100) and 3.7M (one node of eight, with Ulysses
SP and ZeRO-3, which this estimator does not model). Lengths to 16k tokens on one GPU, to 128k on eight.

Run: .venv/bin/python benchmarks/alst_reach.py     (about 25 minutes on 2 cores: tiled traces grow with length)
"""

import time

from transformers import LlamaConfig

from longctx import guide, models
from longctx.memory import cards
from longctx.memory.estimate import reach


def main() -> None:
    capacity = cards.capacity("H100-80GB")[0]
    alst = {1: guide.ALST_ONE_GPU.value, 8: guide.ALST_ONE_NODE.value}
    print(f"{'model':14s} {'GPUs':>4s} {'guide levers':>13s} {'+ tiled MLP':>12s} {'ALST':>10s}  seconds")
    for name, spec in (("llama-3.1-8b", LlamaConfig(**models.LLAMA_3_1_8B)), ("qwen3-8b", "qwen3-8b")):
        for gpus, multiple in ((1, 16384), (8, 131072)):
            start, found = time.perf_counter(), []
            for tiled in (False, True):
                levers = dict(offload=True, tiled_mlp=tiled) | (dict(cp_size=gpus) if gpus > 1 else {})
                found.append(reach(spec, capacity, multiple=multiple, **levers)["seq_len"])
            shown = f"{alst[gpus]:,}" if name == "llama-3.1-8b" else "—"
            print(
                f"{name:14s} {gpus:4d} {found[0]:13,d} {found[1]:12,d} {shown:>10s}  {time.perf_counter() - start:.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
