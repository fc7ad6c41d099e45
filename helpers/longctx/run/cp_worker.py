"""One rank of `torchrun --standalone --nproc_per_node N -m longctx.run.cp_worker SPEC.json` (started by
parallel.launch): one real TRL SFTTrainer step on one process ("single"), with context parallelism ("cp") or with
DeepSpeed Ulysses ("sp"). Each rank writes rank<r>.json (loss, step time, memory); rank 0 also grads.pt."""

import contextlib
import json
import os
import sys
import time
from pathlib import Path


def deepspeed_config() -> dict:
    """The Ulysses run's DeepSpeed config. `torch_adam`: torch.optim.AdamW, where DeepSpeed would pick FusedAdam on a
    GPU, a CUDA extension it JIT-compiles with nvcc (longctx installs DeepSpeed with DS_BUILD_OPS=0: no prebuilt ops)."""
    # "auto": transformers fills these from the SFTConfig (integrations/deepspeed.py), where fixed values that differ
    # from it are refused when the trainer starts
    adam = {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}}
    batch = dict(train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto")
    return dict(batch, zero_optimization=dict(stage=1), optimizer=adam)


def sft_kwargs(spec: dict, world: int) -> dict:
    """The SFTConfig arguments of one rank (a GPU's built anywhere: SFTConfig itself checks for bf16): one step, no
    clipping (the gradients are compared as computed)."""
    from accelerate import ParallelismConfig

    from longctx.train import on_this_machine

    kwargs = dict(
        output_dir=str(Path(spec["out"]) / "trainer"), max_steps=1, seed=spec["seed"], max_length=spec["seq_len"],
        max_grad_norm=0.0, learning_rate=1e-3, per_device_train_batch_size=1, packing=False, save_strategy="no", logging_steps=1,
        activation_checkpointing=spec["checkpointing"],
        **on_this_machine(spec["device"]) | {"bf16": spec["device"] == "cuda"},  # (a GPU's config, built anywhere)
    )  # fmt: skip
    if spec["mode"] == "cp":
        kwargs.update(
            parallelism_config=ParallelismConfig(cp_size=world, cp_backend="torch"),
            fsdp=True,  # transformers 5.24 deprecates the strategy string ("full_shard" is reshard_after_forward=True)
            fsdp_config={"fsdp_version": 2, "reshard_after_forward": True},
        )
    elif spec["mode"] == "sp":
        from accelerate.utils import DeepSpeedSequenceParallelConfig

        handler = DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=True, sp_attn_implementation="sdpa")
        kwargs.update(
            parallelism_config=ParallelismConfig(sp_size=world, sp_backend="deepspeed", sp_handler=handler),
            deepspeed=deepspeed_config(),
            accelerator_config={"use_configured_state": True},
        )
    return kwargs


def _full_grads(model, grad_of=lambda p: p.grad) -> dict:
    """Every parameter's whole gradient on the CPU: FSDP2 shards gathered, DeepSpeed's read with its own `grad_of`."""
    grads = {name.removeprefix("module."): grad_of(p) for name, p in model.named_parameters()}
    grads = {n: g.full_tensor() if hasattr(g, "full_tensor") else g for n, g in grads.items() if g is not None}
    return {n: g.detach().cpu().clone() for n, g in grads.items()}


def main(spec_path: str) -> None:
    import torch
    import torch.distributed as dist
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from longctx import compat, data, models, quiet
    from longctx.memory.measure import TimelineTracker

    quiet.for_lessons()  # each rank's output reaches the notebook's log: the libraries' chatter would repeat per rank
    spec = json.loads(Path(spec_path).read_text())
    out, mode = Path(spec["out"]), spec["mode"]
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    record: dict = {"rank": rank, "world": world, "mode": mode}
    box: dict = {}
    in_step = contextlib.nullcontext()  # DeepSpeed's gradients live only inside its step: read there
    if spec["device"] == "cpu" and mode == "cp":
        compat.register_cpu_ring_attention()
        compat.accelerate_fsdp_on_cpu()
    if mode == "sp":
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        from accelerate import PartialState
        from deepspeed.utils import safe_get_full_grad

        if spec["device"] == "cpu":  # no JIT build of DeepSpeed's CPU shared-memory op (and no lock to wait on)
            compat.deepspeed_without_shm_build()
        PartialState(backend="gloo" if spec["device"] == "cpu" else "nccl")
        in_step = compat.before_deepspeed_step(lambda: box.update(grads=_full_grads(trainer.model, safe_get_full_grad)))
    torch.manual_seed(spec["seed"])
    model = models.load(spec["model"], seed=spec["seed"], dtype=spec.get("dtype", "fp32"))
    tok = data.tokenizer_for(spec["model"])  # a real model reads the corpus through its own tokenizer
    if spec.get("documents"):  # a lesson's own documents
        from datasets import Dataset

        dataset = Dataset.from_dict({"input_ids": spec["documents"]})
    else:
        dataset = data.long_sequences(spec["seq_len"], 1, tokenizer=tok, seed=spec["seed"])

    class Measure(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            box["t"] = tracker = TimelineTracker(spec["device"])  # "cuda": this rank's device (accelerate set it)
            tracker.track_external(model, optimizer)
            tracker.__enter__()
            tracker.record()
            box["start"] = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if mode != "sp":
                box["grads"] = _full_grads(model)

        def on_step_end(self, args, state, control, **kwargs):
            record["step_seconds"] = time.perf_counter() - box["start"]
            box["t"].record()
            box["t"].__exit__(None, None, None)
            prof = box["t"].profile("memtracker")
            most = prof.max_by_category()
            record.update(peak_bytes=prof.peak_bytes, max_by_category=most, activations_peak_bytes=most["activations"])

    if spec.get("args"):  # the function a lesson wrote, shipped by value
        import dill

        from longctx.run.parallel import check_args

        args = dill.loads(Path(spec["args"]).read_bytes())(world)
        check_args(args, mode, world)
    else:
        args = SFTConfig(**sft_kwargs(spec, world))
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok)
    trainer.add_callback(Measure())
    quiet.no_log_printing(trainer)
    with in_step:
        trainer.train()
    record["loss"] = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    if rank == 0:
        torch.save(box.get("grads", {}), out / "grads.pt")
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
