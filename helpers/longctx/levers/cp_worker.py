"""One rank of a multi-process run, started by torchrun (see longctx.levers.parallel).

Runs one real TRL SFTTrainer step: on one process ("single"), with context parallelism over all ranks
("cp": accelerate ParallelismConfig(cp_size=N) + FSDP2 + torch's ring attention), or with DeepSpeed
Ulysses sequence parallelism ("sp"). Each rank writes rank<r>.json (loss, step time, its memory
profile) and rank 0 writes the full gradients to grads.pt, so the launcher can compare with one process.

Usage (what longctx.levers.parallel runs): torchrun --standalone --nproc_per_node N -m longctx.levers.cp_worker SPEC.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from longctx.recipe import Call


def deepspeed_config() -> dict:
    """The DeepSpeed config of the Ulysses run. `torch_adam` makes DeepSpeed build torch.optim.AdamW: left
    to itself it picks FusedAdam on a GPU, a CUDA extension that it JIT-compiles with nvcc at start-up
    (longctx installs DeepSpeed with DS_BUILD_OPS=0: no prebuilt ops)."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 1},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
    }


def parallel_kwargs(mode: str, world: int) -> dict:
    """The SFTConfig arguments that spread one sequence over `world` ranks: "cp" (context parallelism,
    FSDP2) or "sp" (DeepSpeed Ulysses); nothing for "single"."""
    from accelerate import ParallelismConfig

    if mode == "cp":
        return dict(
            parallelism_config=Call(ParallelismConfig, {"cp_size": world, "cp_backend": "torch"}),
            fsdp="full_shard",
            fsdp_config={"fsdp_version": 2, "reshard_after_forward": True},
        )
    if mode == "sp":
        from accelerate.utils import DeepSpeedSequenceParallelConfig

        handler = Call(DeepSpeedSequenceParallelConfig, {"sp_seq_length_is_variable": True, "sp_attn_implementation": "sdpa"})
        return dict(
            parallelism_config=Call(ParallelismConfig, {"sp_size": world, "sp_backend": "deepspeed", "sp_handler": handler}),
            deepspeed=deepspeed_config(),
            accelerator_config={"use_configured_state": True},
        )
    return {}


def sft_call(spec: dict, world: int):
    """The SFTConfig of one rank, as a recipe.Call (what a lesson prints and a rank builds)."""
    from longctx.train import TrainConfig

    extra = dict(
        packing=False,
        pad_to_multiple_of=spec.get("pad_to_multiple_of"),
        save_strategy="no",
        disable_tqdm=True,
        **parallel_kwargs(spec["mode"], world),
    )
    return TrainConfig(
        output_dir=str(Path(spec["out"]) / "trainer"),
        max_steps=1,
        seed=spec["seed"],
        gradient_checkpointing=spec["checkpointing"],
        max_length=spec["seq_len"],
        bf16=spec["device"] == "cuda",
        for_device=spec["device"],
        max_grad_norm=0.0,  # no clipping: the gradients are compared as computed
        extra=extra,
    ).sft_call()


def _full_grads(model, deepspeed: bool = False) -> dict:
    """Every parameter's whole gradient (FSDP2 shards gathered; DeepSpeed's read through its own API)."""
    grads = {}
    for name, p in model.named_parameters():
        if deepspeed:
            from deepspeed.utils import safe_get_full_grad

            g = safe_get_full_grad(p)
        else:
            g = p.grad
        if g is not None:
            g = g.full_tensor() if hasattr(g, "full_tensor") else g
            grads[name.removeprefix("module.")] = g.detach().cpu().clone()  # compared on the CPU, not on GPU 0
    return grads


def main(spec_path: str) -> None:
    import torch
    import torch.distributed as dist
    from transformers import TrainerCallback
    from trl import SFTTrainer

    from longctx import compat, data, models, quiet
    from longctx.memory.measure import TimelineTracker

    quiet.for_lessons()  # each rank's output reaches the notebook's log: the libraries' chatter would repeat per rank
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if spec["device"] == "cpu" and spec["mode"] == "cp":
        compat.register_cpu_ring_attention()
        compat.accelerate_fsdp_on_cpu()
    if spec["mode"] == "sp":
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        from accelerate import PartialState

        PartialState(backend="gloo" if spec["device"] == "cpu" else "nccl")
    torch.manual_seed(spec["seed"])
    model = models.load(spec["model"], seed=spec["seed"], dtype=spec.get("dtype", "fp32"))
    tok = data.tokenizer_for(spec["model"])  # a real model reads the corpus through its own tokenizer
    dataset = data.long_sequences(spec["seq_len"], 1, tokenizer=tok, seed=spec["seed"])
    args = sft_call(spec, world).build()
    record: dict = {"rank": rank, "world": world, "mode": spec["mode"]}
    tracker_box: dict = {}

    class Measure(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            tracker = TimelineTracker(spec["device"])  # "cuda" = this rank's current device (accelerate set it)
            tracker.track_external(model, optimizer)
            tracker.__enter__()
            tracker.record()
            tracker_box["t"] = tracker
            record["start"] = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if spec["mode"] != "sp":  # under DeepSpeed the gradients are read by capture_deepspeed_grads
                tracker_box["grads"] = _full_grads(model)

        def on_step_end(self, args, state, control, **kwargs):
            record["step_seconds"] = time.perf_counter() - record["start"]
            tracker = tracker_box["t"]
            tracker.record()
            tracker.__exit__(None, None, None)
            prof = tracker.profile("memtracker")
            record["peak_bytes"] = prof.peak_bytes
            record["max_by_category"] = prof.max_by_category()
            record["activations_peak_bytes"] = prof.max_by_category()["activations"]

    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok, callbacks=[Measure()])
    quiet.no_log_printing(trainer)
    if spec["mode"] == "sp":
        with compat.before_deepspeed_step(lambda: tracker_box.update(grads=_full_grads(trainer.model, deepspeed=True))):
            trainer.train()
    else:
        trainer.train()
    record["loss"] = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    if rank == 0:
        grads = tracker_box.get("grads", {})
        torch.save(grads, out / "grads.pt")
        record["grad_norm"] = float(sum((g.double() ** 2).sum() for g in grads.values()) ** 0.5)
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    # torch FSDP2+CP processes sometimes abort at interpreter exit ("terminate called without an active
    # exception"); every rank has written its results and passed the barrier, so leave without teardown.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
