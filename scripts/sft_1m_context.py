"""Fine-tune Qwen3-8B on single sequences of 1,048,576 tokens on one node of 8 GPUs: the recipe of TRL's documentation
page "Training Beyond 1M Tokens" (huggingface.co/docs/trl/en/long_context_training) and of its example
`examples/sft_qwen3_8b_1m_context`, as one file that needs trl, transformers, accelerate and datasets, nothing else.

What each setting does, and what it costs, is one lesson of this repository each: the chunked loss (01, SFTTrainer's
default), YaRN (02), checkpointing with offload (03), context parallelism over the 8 GPUs (04, through the accelerate
config beside this file), the model in bf16 (00). Check the memory of this exact set-up on any machine first:

    longctx plan --model qwen3-8b --seq-len 1M --gpus 8 --gpu H100-80GB --mixed-precision

then on the node:

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True accelerate launch \
        --config_file scripts/context_parallel_8gpu.yaml scripts/sft_1m_context.py \
        [--model Qwen/Qwen3-8B] [--seq-len 1048576] [--steps 12] [--dataset emozilla/pg19] [--out Qwen3-8B-1M]

The allocator setting is the guide's: at a million tokens the caching allocator's fragmentation decides whether the
step fits. `--cpu` rehearses the same code on a CPU at a toy length (no offload there: it needs an accelerator).
"""

import argparse
import os

QWEN3_TRAINED_LENGTH = 32768  # the positions Qwen3 models are trained on (their model cards), not max_position_embeddings


def yarn(config, trained_length: int, seq_len: int) -> dict:
    """from_pretrained's keywords that rescale `config`'s rotary positions from `trained_length` to `seq_len` (YaRN):
    the dict replaces the model's rope_parameters, so it carries the model's own rope_theta."""
    theta = config.rope_parameters["rope_theta"]
    rope = {"rope_type": "yarn", "rope_theta": theta, "factor": seq_len / trained_length}
    rope["original_max_position_embeddings"] = trained_length
    return {"rope_parameters": rope, "max_position_embeddings": seq_len}


def training_args(config, *, seq_len, trained_length, steps, out, world_size, offload=True, **here):
    """The SFTConfig every rank builds. `config`: the model's config (for its rope_theta); `here`: settings of the
    machine it runs on (use_cpu, bf16) where they differ from a GPU node's."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=out,
        per_device_train_batch_size=1,  # one book-length sequence per step
        max_length=seq_len,
        max_steps=steps,
        learning_rate=1e-5,
        logging_steps=1,  # a step is minutes long: log each one
        save_strategy="no",  # the final model is saved at the end; a checkpoint of an 8B model is 100+ GB
        pad_to_multiple_of=2 * world_size,  # context parallelism gives each rank two chunks
        activation_checkpointing=True,
        activation_checkpointing_kwargs={"offload": True} if offload else None,  # layer inputs in host memory
        model_init_kwargs={"dtype": "bfloat16", **yarn(config, trained_length, seq_len)},
        **here,
    )


def books(dataset: str, rows: int, chars: int):
    """`rows` rows of text, each books joined end to end until it holds `chars` characters (the trainer truncates to
    max_length). Not packing: packed documents are kept apart by a mask, which context parallelism drops."""
    from datasets import Dataset, load_dataset

    stream = load_dataset(dataset, split="train", streaming=True)  # a hub id or a folder in the hub's layout
    texts, current = [], []
    for book in stream:
        current.append(book["text"])
        if sum(map(len, current)) >= chars:
            texts.append("\n\n".join(current))
            current = []
            if len(texts) == rows:
                return Dataset.from_dict({"text": texts})
    raise SystemExit(f"{dataset} holds fewer than {rows} rows of {chars:,} characters: lower --steps or --seq-len.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen3-8B", help="a hub id or a model folder")
    ap.add_argument("--seq-len", type=int, default=1048576, help="tokens per sequence (max_length)")
    ap.add_argument("--trained-length", type=int, default=QWEN3_TRAINED_LENGTH, help="the model's trained positions")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dataset", default="emozilla/pg19", help="a hub dataset id or a local folder of parquet files")
    ap.add_argument("--out", default="Qwen3-8B-1M")
    ap.add_argument("--cpu", action="store_true", help="rehearse on a CPU: no bf16 autocast, no offload")
    args = ap.parse_args()
    if args.seq_len <= args.trained_length:
        ap.error(f"--seq-len {args.seq_len} is inside the {args.trained_length} trained positions: no YaRN needed.")
    if not args.cpu and "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        print("note: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is not set; the guide's run needs it at 1M")

    from transformers import AutoConfig
    from trl import SFTTrainer

    world_size = int(os.environ.get("WORLD_SIZE", 1))
    here = {"use_cpu": True, "bf16": False} if args.cpu else {}
    config = AutoConfig.from_pretrained(args.model)
    train_args = training_args(
        config,
        seq_len=args.seq_len,
        trained_length=args.trained_length,
        steps=args.steps,
        out=args.out,
        world_size=world_size,
        offload=not args.cpu,
        **here,
    )
    dataset = books(args.dataset, rows=args.steps, chars=6 * args.seq_len)  # prose: under 6 characters a token
    trainer = SFTTrainer(model=args.model, args=train_args, train_dataset=dataset)
    trainer.train()
    trainer.save_model(args.out)
    first = next(row for row in trainer.state.log_history if "loss" in row)
    if trainer.is_world_process_zero():
        print(f"first loss {first['loss']:.3f}, {first['num_tokens']:,.0f} tokens (the guide: 4.311, 1049000)")


if __name__ == "__main__":
    main()
