"""Estimate a full-size training step's memory without allocating it: the same step as `measure`,
run on fake tensors (torch's FakeTensorMode: shapes, dtypes and devices, no storage).

The model is built from its config under fake mode, in the training dtype; AdamW's state is created
by one warm-up step, as in every step after the first; then forward, loss, backward and the
optimizer step run under the same tracker as the CPU measurement. Activation offload is modelled the
way transformers implements it (`save_on_cpu` around each checkpointed layer) with the `meta` device
standing in for host memory, so device and host bytes are counted apart.
"""

from __future__ import annotations

import contextlib
import time

import torch

from ..errors import LongctxError
from ..train import LOSSES
from .measure import TimelineTracker
from .profile import CATEGORIES, GIB, MemoryProfile

from ..models import DTYPE_NAMES, torch_dtype

DTYPES = {name: torch_dtype(name) for name in DTYPE_NAMES}
MAX_TOKENS = 16 * 2**20  # tokens per estimated step: 16 times the guide's longest (1M takes ~30 s to estimate)
DEFAULT_DTYPE = "bf16"  # what the guide measured and what the `gpu` sizes load (tests hold them together)
HOST = "meta"  # stands in for host memory in fake mode (a fake 'cuda' cannot run backward on a CPU build)


def check_model(cfg) -> None:
    """Refuse, before building anything, a config the estimate cannot stand for: not a decoder-only
    language model (an encoder such as BERT, an encoder-decoder such as T5), or sizes that are not
    positive integers."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    from ..data import check_positive_int

    kind = getattr(cfg, "model_type", "")
    encoder = kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(cfg, "is_decoder", False)
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or encoder or getattr(cfg, "is_encoder_decoder", False):
        raise LongctxError(f"model_type {kind!r} is not a decoder-only language model; longctx estimates causal LMs "
                           "(Qwen3, Llama, Mistral, Gemma, Phi, MoE families), the models TRL's SFTTrainer trains.")
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    for name in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size"):
        if getattr(text, name, None) is not None:
            check_positive_int(f"the config's {name}", getattr(text, name))
    heads, kv = getattr(text, "num_attention_heads", None), getattr(text, "num_key_value_heads", None)
    if heads and kv and heads % kv:
        raise LongctxError(f"The config has {heads} attention heads and {kv} key/value heads: grouped attention needs "
                           "the first to be a multiple of the second.")


def check_levers(cfg, seq_len, *, loss: str, checkpointing: bool, offload: bool, dtype: str, batch: int) -> None:
    from ..data import check_positive_int

    check_model(cfg)
    check_positive_int("seq_len", seq_len)
    if seq_len * batch > MAX_TOKENS:
        raise LongctxError(f"{seq_len * batch:,} tokens per step: longctx estimates up to {MAX_TOKENS:,} (16 times "
                           "the guide's million-token step); give a shorter sequence or a smaller batch.")
    check_positive_int("batch", batch)
    if loss not in LOSSES:
        raise LongctxError(f"Unknown loss {loss!r}; use one of {', '.join(LOSSES)}.")
    if dtype not in DTYPES:
        raise LongctxError(f"Unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}.")
    if offload and not checkpointing:
        raise LongctxError("Activation offload moves the tensors that checkpointing saves; it needs "
                           "gradient checkpointing on (drop --no-checkpointing, or drop --offload).")


def _to_host(t):
    return (t.device, t.to(HOST))


def _to_device(packed):
    device, t = packed
    return t.to(device)


@contextlib.contextmanager
def _default_dtype(dtype):
    # model.to(dtype) fails under fake mode; building in the right default dtype does not
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def build_step(cfg, seq_len: int, *, loss: str = "chunked", checkpointing: bool = True, offload: bool = False,
               batch: int = 1, lr: float = 1e-5, seed: int = 0, mesh=None, mixed_precision: bool = False):
    """Model, optimizer (its state already created) and a `step()` closure: forward, loss, backward,
    optimizer step. Runs the same on real tensors (measure) and under FakeTensorMode (estimate).

    With a device `mesh` the model is sharded with FSDP2 over it (each decoder layer, then the root, as
    accelerate wraps transformer layers) and the step runs under torch's `context_parallel`, which gives
    this rank its slice of the sequence and routes attention through the ring. `mixed_precision` keeps
    fp32 master weights and optimizer state with bf16 compute (FSDP2 MixedPrecisionPolicy), as
    accelerate's `mixed_precision: bf16` does."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    net = AutoModelForCausalLM.from_config(cfg)
    if checkpointing:
        if not net.supports_gradient_checkpointing:
            raise LongctxError(f"{type(net).__name__} does not support gradient checkpointing; "
                               "estimate without it (--no-checkpointing).")
        if offload:  # transformers' save_on_cpu-around-checkpoint, with `meta` as the host
            from ..offload import install

            install(net, _to_host, _to_device)
        else:
            net.activation_checkpointing_enable()
    if loss == "chunked":
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(net, outputs=("log_probs",))
    if mesh is not None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_precision \
            else MixedPrecisionPolicy()
        for layer in net.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(net, mesh=mesh, mp_policy=policy)
    net.train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr)
    for p in net.parameters():  # one warm-up step creates AdamW's state, as before every later step
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq_len))

    def step():
        if mesh is None:
            return _step()
        from torch.distributed.tensor.experimental import context_parallel

        with context_parallel(mesh, buffers=[ids], buffer_seq_dims=[1]):  # this rank keeps 2 of 2·N chunks
            return _step()

    def _step():
        if loss == "chunked":
            out = net(input_ids=ids, labels=ids, fused_lm_head=True, use_cache=False)
            value = -out.log_probs.sum() / out.label_mask.sum().clamp(min=1)
        else:
            value = net(input_ids=ids, labels=ids, use_cache=False).loss
        value.backward()
        optimizer.step()
        return value

    return net, optimizer, step


def check_cp(cfg, seq_len: int, cp_size: int, *, mixed_precision: bool, fake: bool, dtype: str) -> None:
    from ..data import check_positive_int
    from ..parallel import check_plan

    check_positive_int("cp_size", cp_size)
    if cp_size & (cp_size - 1):
        raise LongctxError(f"cp_size={cp_size}: longctx models context parallelism over a power of two of GPUs "
                           "(1, 2, 4, 8, ...), the meshes the guide and accelerate's examples use; pick one of those.")
    if cp_size > 1:
        check_plan(cfg, seq_len, cp_size=cp_size)
        if not fake:
            raise LongctxError("A context-parallel step is estimated on fake tensors only (fake=True); real CP runs "
                               "go through longctx.parallel.launch.")
    if mixed_precision and (cp_size == 1 or dtype != "bf16"):
        raise LongctxError("mixed_precision (fp32 master weights, bf16 compute) is modelled with FSDP2: use it with "
                           "cp_size > 1 and dtype='bf16'.")


@contextlib.contextmanager
def _fake_mesh(cp_size: int):
    """A one-rank view of an N-rank job: torch's fake process group (no communication) and a CPU mesh."""
    if cp_size == 1:
        yield None
        return
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from .. import compat

    if dist.is_initialized():
        raise LongctxError("estimate(cp_size>1) builds its own fake process group; call it from a process that has "
                           "no torch.distributed group initialised.")
    compat.register_cpu_ring_attention()  # the fake "device" is the CPU: its attention kernel needs the ring handler
    dist.init_process_group("fake", rank=0, world_size=cp_size, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (cp_size,), mesh_dim_names=("cp",))
    finally:
        dist.destroy_process_group()


def estimate(model, seq_len: int, *, loss: str = "chunked", checkpointing: bool = True,
             offload: bool = False, dtype: str = DEFAULT_DTYPE, batch: int = 1, fake: bool = True, cp_size: int = 1,
             mixed_precision: bool = False) -> MemoryProfile:
    """The MemoryProfile of one training step of `model` (preset, config.json path or config object)
    on `batch` sequences of `seq_len` tokens, computed on fake tensors. With `fake=False` the very same
    step runs for real on the CPU (small models only): that is how the estimator is checked.

    With `cp_size=N` the profile is one rank's of an N-GPU context-parallel job (FSDP2 sharding, this
    rank's slice of the sequence, the ring's buffers), run under torch's fake process group."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .. import compat, models

    cfg = models.config(model) if isinstance(model, str) else model
    check_levers(cfg, seq_len, loss=loss, checkpointing=checkpointing, offload=offload, dtype=dtype, batch=batch)
    check_cp(cfg, seq_len, cp_size, mixed_precision=mixed_precision, fake=fake, dtype=dtype)
    if offload and not fake:
        raise LongctxError("A real CPU step has no separate host memory to offload to; estimate it (fake=True).")
    layer_input = batch * (seq_len // cp_size) * cfg.hidden_size * DTYPES[dtype].itemsize
    start = time.perf_counter()
    fake_mode = FakeTensorMode() if fake else contextlib.nullcontext()
    build_dtype = torch.float32 if mixed_precision else DTYPES[dtype]
    with _fake_mesh(cp_size) as mesh, fake_mode, compat.fake_tensor_training(), _default_dtype(build_dtype):
        net, optimizer, step = build_step(cfg, seq_len, loss=loss, checkpointing=checkpointing, offload=offload,
                                          batch=batch, mesh=mesh, mixed_precision=mixed_precision)
        tracker = TimelineTracker("cpu", host=HOST, band_bytes=layer_input)
        tracker.track_external(net, optimizer)
        with tracker:
            tracker.record()
            step()
            tracker.record()
    profile = tracker.profile("fake-tensors" if fake else "memtracker")
    first = dict(zip(CATEGORIES, profile.timeline[0]))
    profile.meta.update(
        model=model if isinstance(model, str) else (getattr(cfg, "_name_or_path", "") or cfg.model_type),
        seq_len=seq_len, batch=batch, loss=loss, checkpointing=checkpointing, offload=offload, dtype=dtype,
        cp_size=cp_size, tokens_per_rank=seq_len // cp_size, mixed_precision=mixed_precision,
        params=sum(p.numel() for p in net.parameters()),
        fixed_gib=(first["parameters"] + first["optimizer"]) / GIB,  # alive the whole step
        per_layer_saved_gib=layer_input / GIB,
        saved_layer_tensors=int(tracker.forward_end_activations.get(layer_input, 0)),
        device_peak_gib=profile.peak_gib, wall_seconds=time.perf_counter() - start,
    )
    return profile


def reach(model, capacity_gib: float, *, multiple: int = 1024, known: dict[int, float] | None = None,
          **levers) -> dict:
    """The longest sequence (a multiple of `multiple`) whose estimated peak fits `capacity_gib`.

    Past the fixed-size tile regime the peak grows almost linearly with length, so the answer is found
    by the secant method from 32k and 96k tokens: each new estimate re-draws the line through the last
    two points. `known` maps lengths already estimated (with the same levers) to their peaks in GiB."""
    peaks = dict(known or {})

    def peak(n: int) -> float:
        if n not in peaks:
            peaks[n] = estimate(model, n, **levers).peak_gib
        return peaks[n]

    points = [32 * multiple, 96 * multiple]
    for _ in range(8):
        (x0, x1) = points[-2:]
        slope = (peak(x1) - peak(x0)) / (x1 - x0)
        guess = max(multiple, int((x1 + (capacity_gib - peak(x1)) / slope) // multiple * multiple))
        if guess in points:
            break
        points.append(guess)
    fitting = [n for n in peaks if peaks[n] <= capacity_gib]
    if not fitting:
        shortest = min(peaks)
        raise LongctxError(f"Even {shortest:,} tokens need {peaks[shortest]:.1f} GiB, over the {capacity_gib:g} GiB "
                           "capacity: add levers (chunked loss, checkpointing, offload) or more memory.")
    best = max(fitting)
    return {"seq_len": best, "peak_gib": peak(best), "gib_per_1k_tokens": slope * 1024,
            "intercept_gib": peak(x1) - slope * x1, "estimates": len(peaks) - len(known or {})}
