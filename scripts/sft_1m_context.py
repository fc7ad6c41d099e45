"""Fine-tune a Qwen3 model on single million-token sequences on one 8-GPU node, driven by longctx.

The same recipe as TRL's `examples/sft_qwen3_8b_1m_context`: chunked loss (SFTTrainer's default),
YaRN factor 32 on the 32,768 trained positions, checkpointing with offload, padding to a multiple of
16 (2 × 8 ranks), context parallelism over the 8 GPUs (accelerate config beside this file), PG-19 books
joined end to end (the parquet copy emozilla/pg19; deepmind/pg19 is a script dataset that datasets >= 4
refuses). Check the memory of this exact set-up first, on any machine (fake tensors, no GPU):

    longctx plan --model qwen3-8b --seq-len 1M --gpus 8 --gpu H100-80GB --mixed-precision

then, on the node:

    accelerate launch --config_file scripts/context_parallel_8gpu.yaml scripts/sft_1m_context.py \
        [--model Qwen/Qwen3-8B] [--seq-len 1M] [--steps 12] [--dataset emozilla/pg19] [--out Qwen3-8B-1M]
"""

import argparse
import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # large contiguous tensors at 1M


def train_config(seq_len: int, steps: int, out: str, processes: int, for_device: str | None = None):
    """The TrainConfig of every rank (lesson 06 prints it as the SFTConfig a reader copies)."""
    from longctx.train import TrainConfig

    return TrainConfig(
        output_dir=out,
        max_steps=steps,
        max_length=seq_len,
        gradient_checkpointing=True,
        offload=True,
        bf16=True,
        learning_rate=1e-5,
        for_device=for_device,
        extra={"pad_to_multiple_of": 2 * processes, "save_strategy": "no"},
    )  # CP's load balance: 2 chunks per rank


def main() -> None:
    from accelerate import PartialState

    from longctx import data, models
    from longctx.lengths import parse_length
    from longctx.levers import rope
    from longctx.train import run_sft

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen/Qwen3-8B")
    ap.add_argument("--seq-len", default="1M")
    ap.add_argument("--trained-length", type=int, default=rope.QWEN3_TRAINED_LENGTH)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dataset", default=data.PG19, help="a hub dataset id or a local folder of parquet files")
    ap.add_argument("--out", default="Qwen3-8B-1M")
    args = ap.parse_args()
    seq_len = parse_length(args.seq_len)
    data.check_dataset(args.dataset)  # a script-only id is refused before any process loads a model
    state = PartialState()
    cfg = rope.with_yarn(models.config(args.model), args.trained_length, seq_len)
    model = models.load(args.model, config=cfg, dtype="bf16")
    tok = data.tokenizer_for(args.model)
    with state.main_process_first():
        dataset = data.long_sequences(seq_len, args.steps, dataset=args.dataset, tokenizer=tok, seed=0)
    result = run_sft(model, dataset, train_config(seq_len, args.steps, args.out, state.num_processes), processing_class=tok)
    if state.is_main_process:
        print(f"first loss {result.losses[0]:.3f} (guide: 4.311); {result.seconds_per_step:.0f} s/step (guide: 380)")


if __name__ == "__main__":
    main()
