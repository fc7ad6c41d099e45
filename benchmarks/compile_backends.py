"""Compile seconds per input shape for inductor and aot_eager, measured in one run (ratios, not limits).

Each backend trains the same compiled SFTTrainer run (tiny model, padded to a multiple of 64, dynamic
shapes off, fresh inductor cache) and its compile time is divided by the shapes its dataloader produced.
aot_eager traces the same graphs (forward and backward) but generates no code, which is why the
notebooks' ci size can use it: the compile *count* is the same, only the seconds differ.

Run: .venv/bin/python benchmarks/compile_backends.py [--steps 8] [--pad 64]
"""

import argparse
import tempfile

from trl import SFTConfig, SFTTrainer

from longctx import data, models, train
from longctx.levers import compiling


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--pad", type=int, default=64)
    ap.add_argument("--model", default="tiny")
    args = ap.parse_args()
    ds = data.varied_sequences(4 * args.steps, 32, 512, seed=0)
    rows = {}
    for backend in ("aot_eager", "inductor"):
        with tempfile.TemporaryDirectory() as out:
            config = SFTConfig(
                output_dir=out,
                per_device_train_batch_size=4,
                max_length=512,
                max_steps=args.steps,
                pad_to_multiple_of=args.pad,
                torch_compile=True,
                torch_compile_backend=backend,
                activation_checkpointing=False,
                save_strategy="no",
                **train.on_this_machine(),
            )
            model = models.load(args.model, seed=0)
            trainer = SFTTrainer(model=model, args=config, train_dataset=ds, processing_class=data.tokenizer())
            run = compiling.compiled_run(trainer)
        shapes = len(run.census.distinct)
        rows[backend] = (shapes, run.counter.count, run.counter.seconds, run.counter.seconds / shapes, run.seconds)
    print(f"{'backend':10s} {'shapes':>6s} {'compiles':>8s} {'compile s':>9s} {'s/shape':>8s} {'run s':>7s}")
    for backend, (shapes, count, secs, per_shape, total) in rows.items():
        print(f"{backend:10s} {shapes:6d} {count:8d} {secs:9.1f} {per_shape:8.1f} {total:7.1f}")
    print(
        f"inductor / aot_eager compile seconds per shape: {rows['inductor'][3] / rows['aot_eager'][3]:.1f}×; "
        f"same compile count: {rows['inductor'][1] == rows['aot_eager'][1]}"
    )


if __name__ == "__main__":
    main()
