"""Estimate a full-size training step's memory without allocating it: the same step as `measure`, on fake tensors
(torch's FakeTensorMode: shapes, dtypes and devices, no storage)."""

import contextlib
import functools
import sys
import time
import types

import numpy as np
import torch

from longctx.errors import LongctxError, check_choice, check_positive_int
from longctx.lengths import MAX_TOKENS
from longctx.memory import costs, gpu_kernels, repeat
from longctx.memory.measure import TimelineTracker, profile_of
from longctx.memory.profile import MemoryProfile
from longctx.models import DTYPE_NAMES, check_sizes, torch_dtype
from longctx.shapes import check_plan
from longctx.train import LOSSES
from longctx.units import CATEGORIES, GIB

DTYPES = {name: torch_dtype(name) for name in DTYPE_NAMES}
DEFAULT_DTYPE = "bf16"  # what the guide measured and what the `gpu` sizes load (tests hold them together)
HOST = costs.HOST  # stands in for host memory in fake mode
DEVICES = ("cuda", "cpu")  # whose kernels the step runs: the GPU's (emulated, compat.gpu_dispatch) or the CPU's
# AdamW's three implementations in torch. The Trainer's default `optim="adamw_torch_fused"` (torch >= 2.8) is
# "fused"; `optim="adamw_torch"` lets torch pick, which is "foreach" on CUDA tensors and "for-loop" on CPU ones.
OPTIMIZERS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}
ATTENTIONS = ("sdpa", "flash_attention_2", "eager")  # transformers' attn_implementation values modelled here
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # estimate(lora=r): the adapters lesson 00's recipe puts on
# how CP ranks exchange keys and values: accelerate's `cp_comm_strategy` (TorchContextParallelConfig; "allgather" its
# default), which it hands to torch's set_rotate_method: one all-gather per attention call, or "alltoall", a ring of sends
CP_COMMS = ("allgather", "alltoall")


def check_model(cfg) -> None:
    """Refuse, before building anything, a config the estimate cannot stand for: not a decoder-only language model
    (an encoder such as BERT, an encoder-decoder such as T5) or sizes outside models.CONFIG_LIMITS. (Whatever else
    transformers cannot build is its own error, named by `estimate`.)"""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

    kind = getattr(cfg, "model_type", "")
    encoder = kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(cfg, "is_decoder", False)
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or encoder or getattr(cfg, "is_encoder_decoder", False):
        raise LongctxError(
            f"model_type {kind!r} is not a decoder-only language model; longctx estimates causal LMs "
            "(Qwen3, Llama, Mistral, Gemma, Phi, MoE families), the models TRL's SFTTrainer trains."
        )
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    check_sizes(text)


def check_levers(
    cfg, seq_len, *, loss: str, checkpointing: bool, offload: bool, dtype: str, batch: int, device: str = "cpu",
    optim: str = "fused", attn_implementation: str = "sdpa", cp_size: int = 1, mixed_precision: bool = False,
    fake: bool = True, tiled_mlp: bool = False, cp_comm: str = "allgather", offload_optimizer: bool = False,
    offload_params: bool = False, fused_norm: bool = False, sp_size: int = 1, lora: int = 0,
) -> None:  # fmt: skip
    """Refuse, before anything is built, a model or a combination of levers the estimate cannot stand for."""
    check_model(cfg)
    for name, value in (("seq_len", seq_len), ("batch", batch), ("cp_size", cp_size), ("sp_size", sp_size)):
        check_positive_int(name, value)
    for name, value, choices in (
        ("loss", loss, LOSSES),
        ("dtype", dtype, DTYPES),
        ("device", device, DEVICES),
        ("optim", optim, OPTIMIZERS),
        ("attn_implementation", attn_implementation, ATTENTIONS),
        ("cp_comm", cp_comm, CP_COMMS),
    ):
        check_choice(name, value, choices)
    dropout = getattr(cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg, "attention_dropout", 0) or 0
    rules = (
        (seq_len * batch > MAX_TOKENS, f"{seq_len * batch:,} tokens per step: longctx estimates up to {MAX_TOKENS:,} "
         "(16 times the guide's million-token step); give a shorter sequence or a smaller batch."),
        (attn_implementation == "flash_attention_2" and (device != "cuda" or dtype == "fp32"), "FlashAttention-2 runs on "
         "CUDA GPUs in bf16/fp16 only: estimate it with device='cuda' (--device cuda) and dtype bf16, or pick "
         "attn_implementation='sdpa'."),
        (offload and not checkpointing, "Activation offload moves the tensors that checkpointing saves; it needs gradient "
         "checkpointing on (checkpointing=True: drop --no-checkpointing; or offload=False: drop --offload)."),
        (sp_size & (sp_size - 1), f"sp_size={sp_size}: longctx models Ulysses over a power of two of GPUs; pick one."),
        (sp_size > 1 and (not fake or attn_implementation == "eager"), "A Ulysses step is estimated on fake tensors "
         "(fake=True), with a fused attention kernel (sdpa or flash_attention_2), as DeepSpeed's Ulysses runs."),
        (sp_size > 1 and seq_len % sp_size, f"seq_len={seq_len:,} is not a multiple of sp_size={sp_size}: Ulysses gives "
         f"each rank an equal slice; pad to {-(-seq_len // sp_size) * sp_size:,} tokens."),
        (cp_size & (cp_size - 1), f"cp_size={cp_size}: longctx models context parallelism over a power of two of GPUs "
         "(1, 2, 4, 8, ...), the meshes the guide and accelerate's examples use; pick one of those."),
        (cp_size > 1 and not fake, "A context-parallel step is estimated on fake tensors only (fake=True); real CP runs "
         "go through longctx.run.parallel.launch."),
        (cp_size > 1 and attn_implementation != "sdpa", "torch's context_parallel splits the sequence by routing "
         "scaled_dot_product_attention through its ring: a context-parallel step needs attn_implementation='sdpa'."),
        (cp_size > 1 and dropout, f"This config's attention_dropout is {dropout}: torch's "
         "context parallelism (2.13) cannot run SDPA with dropout (its ring meets the plain dropout mask beside its "
         "DTensors: 'aten.add.Tensor got mixed torch.Tensor and DTensor'), in training as in this estimate. Set "
         "attention_dropout to 0 in the config (long-context fine-tuning runs without it), or drop --cp-size."),
        (cp_comm != "allgather" and cp_size == 1, f"cp_comm={cp_comm!r} is how context-parallel ranks exchange keys and "
         "values: it needs cp_size > 1 (--cp-size)."),
        (mixed_precision and (cp_size * sp_size == 1 or dtype != "bf16"), "mixed_precision (fp32 master weights, bf16 "
         "compute) is modelled with FSDP2: use it with cp_size or sp_size > 1 and dtype='bf16'."),
        (not fake and device != "cpu", "A real step here runs the CPU's kernels: pass device='cpu' with fake=False, or "
         "estimate the GPU's step on fake tensors (fake=True)."),
        ((offload or offload_optimizer) and not fake, "A real CPU step has no separate host memory to offload to; "
         "estimate it (fake=True)."),
        (offload_params and not offload_optimizer, "Parameter offload is modelled as DeepSpeed runs it, with the "
         "optimizer offloaded too: add offload_optimizer=True (--offload-optimizer)."),
        (offload_params and not checkpointing, "Parameter offload fetches a layer's weights again for its recomputation "
         "in backward: it needs gradient checkpointing on (drop --no-checkpointing)."),
        (lora and (cp_size * sp_size > 1 or offload_optimizer or tiled_mlp), "LoRA is modelled on one GPU with the guide's "
         "levers (checkpointing, offload, the chunked loss): drop the other levers, or estimate the full fine-tune."),
    )  # fmt: skip
    broken = next((message for failed, message in rules if failed), None)
    if broken:
        raise LongctxError(broken)
    if cp_size * sp_size > 1:
        check_plan(cfg, seq_len, cp_size=cp_size, sp_size=sp_size)


def _flash_kernels(cfg) -> list | None:
    """The flash kernels transformers runs this model class on, where the class names them (None: any). GPT-OSS, for
    one, names the hub kernels that take its attention sinks; FlashAttention-2 would drop them."""
    from transformers import AutoModelForCausalLM

    try:
        return getattr(AutoModelForCausalLM._model_mapping[type(cfg)], "_compatible_flash_implementations", None)
    except KeyError:
        return None


@contextlib.contextmanager
def _default_dtype(dtype):
    # model.to(dtype) fails under fake mode; building in the right default dtype does not
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def build_step(
    cfg, seq_len: int, *, loss: str = "chunked", checkpointing: bool = True, offload: bool = False, batch: int = 1,
    lr: float = 1e-5, seed: int = 0, mesh=None, mixed_precision: bool = False, optim: str = "fused",
    attn_implementation: str = "sdpa", tiled_mlp: bool = False, cp_comm: str = "allgather", offload_optimizer: bool = False,
    offload_params: bool = False, fused_norm: bool = False, sp_size: int = 1, autocast: bool = False, lora: int = 0,
):  # fmt: skip
    """Model, optimizer (its state already created) and a `step()` closure — forward, loss, backward, optimizer step —
    the same on real tensors (measure) and under FakeTensorMode (estimate)."""
    from transformers import AutoModelForCausalLM

    from longctx import compat

    torch.manual_seed(seed)
    flash = _flash_kernels(cfg)
    if attn_implementation == "flash_attention_2" and flash is not None:
        raise LongctxError(
            f"transformers runs {cfg.model_type} on the flash kernels its class names ({', '.join(flash)}) and swaps a "
            "request for another flash kernel for one of them; longctx models FlashAttention-2, not among them (on it "
            "GPT-OSS would lose its attention sinks): estimate it with --attn eager, or sdpa where transformers runs it."
        )
    if attn_implementation == "flash_attention_2":
        attn_implementation = compat.register_flash_attention_2(gpu_kernels)
    if sp_size > 1:  # DeepSpeed's Ulysses around the attention kernel (memory/ulysses.py)
        from longctx.memory import ulysses

        attn_implementation = ulysses.register(sp_size, attn_implementation)
    # the dtype the caller set as default (the estimate's `dtype`): from_config would otherwise take a dtype the
    # config names ("dtype": "bfloat16" in most hub configs) over it
    try:
        net = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_implementation, dtype=torch.get_default_dtype())
    except Exception as exc:  # transformers' own errors for a config it cannot build (unknown activation, ...)
        if "does not support an attention implementation" in str(exc):  # the config is fine, the kernel is not
            # (transformers 5.24: Gemma-2 on sdpa); not FlashAttention-2 where the class names its own flash kernels
            others = [a for a in ATTENTIONS if a != attn_implementation and not (flash is not None and a.startswith("flash"))]
            raise LongctxError(
                f"transformers does not run {getattr(cfg, 'model_type', '?')} models with attn_implementation="
                f"{attn_implementation!r}; estimate it with another one: --attn {' or --attn '.join(others)} "
                "(attn_implementation= in Python; eager is what transformers picks for it by default)."
            ) from None
        raise  # estimate() names the model that transformers cannot build
    if lora:  # peft's LoRA on the attention projections, the base frozen; peft keeps the adapters in fp32
        from peft import LoraConfig, inject_adapter_in_model

        with _default_dtype(torch.float32), compat.lora_adapters_where_made():
            inject_adapter_in_model(LoraConfig(r=lora, lora_alpha=2 * lora, target_modules=list(LORA_TARGETS)), net)
        for name, p in net.named_parameters():
            p.requires_grad_("lora_" in name)
        net.enable_input_require_grads()  # as transformers' Trainer does for a model with frozen embeddings
    if checkpointing:  # (transformers refuses a class without gradient checkpointing itself)
        if offload:  # transformers' save_on_cpu-around-checkpoint, with `meta` as the host
            from longctx.levers.offload import install

            install(net, lambda t: (t.device, t.to(HOST)), lambda packed: packed[1].to(packed[0]))
        else:
            net.activation_checkpointing_enable()
    if tiled_mlp:  # ALST's tiled MLP, DeepSpeed's autograd function (longctx.levers.tiled_mlp), for a dense MLP per layer
        if not all(hasattr(layer, "mlp") and not hasattr(layer.mlp, "experts") for layer in _decoder_layers(net)):
            raise LongctxError(f"the tiled MLP tiles one dense MLP per layer; {type(net).__name__} has none: drop --tiled-mlp.")
        from longctx.levers.tiled_mlp import tile_mlp

        tile_mlp(net)
    if fused_norm:  # Liger's RMSNorm kernel, as its memory is (longctx.levers.fused_norm)
        from longctx.levers.fused_norm import fuse_norms

        if not fuse_norms(net):
            raise LongctxError(f"{type(net).__name__} has no Llama-style RMSNorm for a fused norm to replace: drop --fused-norm.")
    if loss == "chunked" and net.base_model is net:
        raise LongctxError(
            f"TRL's chunked loss runs the backbone as `model.base_model`, which for {type(net).__name__} is the model "
            f"itself (its base_model_prefix {net.base_model_prefix!r} names no attribute): trl 1.16 cannot train it with "
            "the chunked loss. Estimate it with --loss plain (loss='plain')."
        )
    if loss == "chunked":
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(net, outputs=("log_probs",))
    if mesh is not None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # accelerate 1.15 (FullyShardedDataParallelPlugin.set_mixed_precision): bf16 gathers and reduces in bf16
        bf16 = dict(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if mixed_precision else {}
        policy = MixedPrecisionPolicy(**bf16)
        for layer in net.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(net, mesh=mesh, mp_policy=policy)
    net.train()
    if offload_optimizer:  # DeepSpeed's ZeRO offload: the state (and the layers' weights) on the host, the step there
        from longctx.levers.host_state import HostState

        optimizer = HostState(net, HOST, params=offload_params, lr=lr)
        trained = optimizer.masters
    else:
        trained = [p for p in net.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trained, lr=lr, **OPTIMIZERS[optim])
    for p in trained:  # one warm-up step creates AdamW's state, as before every later step
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    forward = policy = contextlib.nullcontext
    if autocast:  # accelerate's prepare_model: the forward under autocast, its outputs in fp32
        from accelerate.utils import convert_outputs_to_fp32

        bound = hasattr(net.forward, "__func__")  # (trl's fused head may have replaced it on the instance)
        wrapped = convert_outputs_to_fp32(net.forward.__func__ if bound else net.forward)
        net.forward = types.MethodType(wrapped, net) if bound else wrapped
        device = next(net.parameters()).device.type  # "cpu": fake CPU tensors standing for a GPU's, under CUDA's policy
        forward = functools.partial(torch.autocast, device, dtype=torch.bfloat16)
        policy = contextlib.nullcontext if device == "cuda" else compat.cuda_autocast_policy_on_cpu
    ids = torch.randint(0, cfg.vocab_size, (batch, seq_len // sp_size))  # under Ulysses, this rank's slice
    ring = mesh is not None and sp_size == 1

    def step():
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import set_rotate_method

        if ring:  # what accelerate does with its cp_comm_strategy before the step
            set_rotate_method(cp_comm)

        # under CP this rank keeps 2 of the sequence's 2·N chunks; the autocast policy holds for the recomputation too
        with context_parallel(mesh, buffers=[ids], buffer_seq_dims=[1]) if ring else contextlib.nullcontext(), policy():
            if loss == "chunked":
                with forward():
                    out = net(input_ids=ids, labels=ids, fused_lm_head=True, use_cache=False)
                value = -out.log_probs.sum() / out.label_mask.sum().clamp(min=1)
            else:
                with forward():
                    value = net(input_ids=ids, labels=ids, use_cache=False).loss
            value.backward()
            optimizer.step()
        return value

    return net, optimizer, step


@contextlib.contextmanager
def _fake_mesh(cp_size: int):
    """A one-rank view of an N-rank job: torch's fake process group (no communication) and a CPU mesh."""
    if cp_size == 1:
        yield None
        return
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from longctx import compat

    compat.register_cpu_ring_attention()  # the fake "device" is the CPU: its attention kernel needs the ring handler
    hook = sys.excepthook  # init_process_group wraps it to prefix "[rank0]:", and destroying the group leaves it wrapped
    dist.init_process_group("fake", rank=0, world_size=cp_size, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (cp_size,), mesh_dim_names=("cp",))
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


def estimate(
    model,
    seq_len: int,
    *,
    loss: str = "chunked",
    checkpointing: bool = True,
    offload: bool = False,
    dtype: str = DEFAULT_DTYPE,
    batch: int = 1,
    fake: bool = True,
    cp_size: int = 1,
    mixed_precision: bool = False,
    device: str | None = None,
    optim: str = "fused",
    attn_implementation: str = "sdpa",
    tiled_mlp: bool = False,
    cp_comm: str = "allgather",
    offload_optimizer: bool = False,
    offload_params: bool = False,
    fused_norm: bool = False,
    sp_size: int = 1,
    exact: bool = False,
    autocast: bool | None = None,
    lora: int = 0,
) -> MemoryProfile:
    """The MemoryProfile of one training step of `model` (preset, config.json path or config object) on `batch`
    sequences of `seq_len` tokens, on fake tensors; `fake=False` runs the same step for real on the CPU (small models:
    how the estimator is checked)."""
    from longctx import models

    device, cfg = device or ("cuda" if fake else "cpu"), models.config(model) if isinstance(model, str) else model
    levers = dict(loss=loss, checkpointing=checkpointing, offload=offload, batch=batch, mixed_precision=mixed_precision)
    levers.update(optim=optim, attn_implementation=attn_implementation, tiled_mlp=tiled_mlp, cp_comm=cp_comm)
    levers.update(offload_optimizer=offload_optimizer, offload_params=offload_params, fused_norm=fused_norm, sp_size=sp_size)
    levers.update(lora=lora)
    check_levers(cfg, seq_len, dtype=dtype, device=device, cp_size=cp_size, fake=fake, **levers)
    ranks = cp_size * sp_size
    layer_input = batch * (seq_len // ranks) * cfg.hidden_size * DTYPES[dtype].itemsize
    how = dict(seq_len=seq_len, dtype=dtype, cp_size=cp_size, fake=fake, device=device, band_bytes=layer_input, levers=levers)
    # a Trainer with bf16=True on one GPU runs the forward under autocast (accelerate's prepare_model); under FSDP2 (CP)
    # and DeepSpeed (the optimizer's offload, Ulysses) their engines keep the precision, and a CPU trains in fp32 here
    trainer = device == "cuda" and dtype == "bf16" and ranks == 1 and not offload_optimizer
    if autocast and not trainer:
        raise LongctxError(
            "autocast=True models accelerate's autocast of a bf16 step on one GPU (device='cuda', dtype='bf16'); under CP "
            "or Ulysses (FSDP2, DeepSpeed) and with the optimizer's offload (DeepSpeed) the engine keeps the precision."
        )
    how["autocast"] = trainer if autocast is None else autocast
    how["tiles"] = fake and not exact and tiled_mlp  # a tiled MLP's middle shards extended (memory/repeat.py)
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    start = time.perf_counter()
    try:
        try:
            if fake and not exact and text.num_hidden_layers > repeat.TRACED[-1] and repeat.identical_layers(text):
                small = [_trace(repeat.shrunk(cfg, n), **how, label_layers=True) for n in repeat.TRACED]
                trace = repeat.extend(*small, text.num_hidden_layers)
                method = "layers %d and %d traced, extended" % repeat.TRACED
            else:
                trace, method = _trace(cfg, **how), "traced"
            if trace["shards_written"]:
                method += "; a tiled MLP's middle shards extended"
        except repeat.NotRepeating:  # layers or shards that run different operators: trace them all
            trace, method = _trace(cfg, **dict(how, tiles=False)), "traced"
    except (LongctxError, MemoryError):  # (a real step on the CPU may run out)
        raise
    except Exception as exc:  # transformers' own code refusing the config that every check above passed
        why = " ".join(str(exc).split())[:240]
        raise LongctxError(
            f"transformers cannot run a step of this config ({type(exc).__name__}: {why}); fix config.json."
        ) from None
    source = "fake-tensors" if fake else "memtracker"
    profile = profile_of("cpu", source, trace["rows"], trace["phases"], trace["host"], trace["bands"], layer_input)
    profile.costs = trace["costs"]
    first = dict(zip(CATEGORIES, profile.timeline[0]))
    profile.note(
        "estimate",
        **levers,
        **{k: trace[k] for k in ("params", "saved_layer_tensors", "hidden_sized_tensors")},
        model=model if isinstance(model, str) else (getattr(cfg, "_name_or_path", "") or cfg.model_type),
        seq_len=seq_len,
        dtype=dtype,
        cp_size=cp_size,
        tokens_per_rank=seq_len // ranks,
        layers=text.num_hidden_layers,
        device=device,
        fixed_gib=(first["parameters"] + first["optimizer"]) / GIB,  # alive the whole step
        per_layer_saved_gib=layer_input / GIB,
        sliding_window=getattr(text, "sliding_window", None),
        attention_mask_gib=trace["mask_bytes"] / GIB,  # (seq × seq) masks transformers built for the attention kernel
        autocast=how["autocast"],
        device_peak_gib=profile.peak_gib,
        method=method,
        wall_seconds=time.perf_counter() - start,
    )
    return profile


def _trace(cfg, *, seq_len, dtype, cp_size, fake, device, band_bytes, levers, autocast, tiles=False, label_layers=False) -> dict:
    """One step of `cfg` under the tracker: its timeline (one row per operator) and the counts `estimate` notes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from longctx import compat

    fake_mode = FakeTensorMode() if fake else contextlib.nullcontext()
    build_dtype = torch.float32 if levers["mixed_precision"] else DTYPES[dtype]
    # under CP the attention stays torch's CPU ring (the only ring a CPU build can run); the rest is the GPU's
    kernels = compat.gpu_dispatch(gpu_kernels, attention=cp_size == 1) if device == "cuda" else contextlib.nullcontext()
    ranks = _fake_mesh(cp_size * levers["sp_size"])  # CP's ranks, or Ulysses'
    with ranks as mesh, fake_mode, compat.fake_tensor_training(), _default_dtype(build_dtype), kernels:
        net, optimizer, step = build_step(cfg, seq_len, mesh=mesh, autocast=autocast, **levers)
        tracker = TimelineTracker("cpu", host=HOST, band_bytes=band_bytes, costs=True)
        if label_layers:
            tracker.label_layers()
        if tiles:
            repeat.repeat_tiles(net, tracker)
        tracker.track_external(net, *(optimizer.tracked() if hasattr(optimizer, "tracked") else [optimizer]))
        tracker.watch_layer_inputs(_decoder_layers(net))
        masks = _attention_masks(net)
        with tracker:
            tracker.record()
            step()
            tracker.record()
    return {
        "rows": np.asarray(tracker.rows, dtype=np.int64),
        "phases": tracker.phases,
        "host": np.asarray(tracker.host_rows, dtype=np.int64),
        "bands": np.asarray(tracker.band_rows, dtype=np.int64),
        "costs": np.asarray(tracker.cost_rows, dtype=np.int64).reshape(-1, len(costs.COLUMNS)),
        "layers": tracker.layer_rows,
        "params": sum(p.numel() for p in net.parameters()),
        "saved_layer_tensors": tracker.layer_inputs_at_forward_end,
        "hidden_sized_tensors": int(tracker.forward_end_activations.get(band_bytes, 0)),
        "mask_bytes": sum(masks.values()),
        "shards_written": tracker.shards_written if tiles else 0,
    }


def _decoder_layers(net) -> list:
    layers = getattr(getattr(net, "model", None), "layers", None)
    if layers is None:
        raise LongctxError(
            f"{type(net).__name__} keeps no decoder layers at .model.layers; longctx estimates the "
            "causal LMs transformers builds that way (Qwen3, Llama, Mistral, Gemma, Phi, MoE families)."
        )
    return list(layers)


def _attention_masks(net) -> dict:
    """Storage → bytes of every attention mask handed to an attention module during the step."""
    seen = {}

    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            storage = mask.untyped_storage()  # keyed by its address: holding it would keep the mask alive
            seen[storage._cdata] = storage.nbytes()

    for layer in _decoder_layers(net):
        attention = getattr(layer, "self_attn", None)
        if attention is not None:
            attention.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def line_reach(capacity_gib: float, intercept_gib: float, peak_gib: float, tokens: int) -> float:
    """Where a straight line through (0 tokens, `intercept_gib`) and (`tokens`, `peak_gib`) meets `capacity_gib`: a
    reach read off one profile, as the lessons read the guide's."""
    return tokens * (capacity_gib - intercept_gib) / (peak_gib - intercept_gib)


def reach(model, capacity_gib: float, *, multiple: int = 1024, known: dict[int, float] | None = None, **levers) -> dict:
    """The longest sequence (a multiple of `multiple`) whose estimated peak fits `capacity_gib`: secant steps from 32
    and 96 multiples (the peak is nearly linear in length), then bisection between the last fit and the first miss."""
    check_positive_int("multiple", multiple)
    if not capacity_gib > 0:
        raise LongctxError(f"capacity_gib must be a positive number of GiB, got {capacity_gib!r}.")
    peaks = {n: p for n, p in (known or {}).items() if n % multiple == 0}
    given = len(peaks)

    def peak(n: int) -> float:
        if n not in peaks:
            peaks[n] = estimate(model, n, **levers).peak_gib
            if known is not None:
                known[n] = peaks[n]
        return peaks[n]

    points = [32 * multiple, 96 * multiple]
    for _ in range(8):
        (x0, x1) = points[-2:]
        slope = (peak(x1) - peak(x0)) / (x1 - x0)
        if slope <= 0:  # a peak that does not grow with length here (an optimizer's, on a small model): walk up
            break
        guess = max(multiple, int((x1 + (capacity_gib - peak(x1)) / slope) // multiple * multiple))
        if guess in points:
            break
        points.append(guess)
    intercept = peak(x1) - slope * x1
    fitting = [n for n in peaks if peaks[n] <= capacity_gib]
    if not fitting and peak(multiple) > capacity_gib:
        raise LongctxError(
            f"Even {multiple:,} tokens need {peaks[multiple]:.1f} GiB, over the {capacity_gib:g} GiB "
            "capacity: add levers (chunked loss, checkpointing, offload) or more memory."
        )
    low = max(n for n in peaks if peaks[n] <= capacity_gib)
    high = min((n for n in peaks if n > low and peaks[n] > capacity_gib), default=None)
    step = multiple
    while high is None:  # nothing known to fail above the best fit: walk up, doubling the stride
        n = low + step
        if n * levers.get("batch", 1) > MAX_TOKENS:
            raise LongctxError(
                f"The estimated peak stays within {capacity_gib:g} GiB up to {low:,} tokens and the estimator goes no "
                f"further ({MAX_TOKENS:,} tokens a step): the reach is beyond what longctx can tell."
            )
        low, high, step = (n, None, step * 2) if peak(n) <= capacity_gib else (low, n, step)
    while high is not None and high - low > multiple:  # bisection on multiples: peak grows with length
        mid = (low + high) // 2 // multiple * multiple
        low, high = (mid, high) if peak(mid) <= capacity_gib else (low, mid)
    return {
        "seq_len": low,
        "peak_gib": peak(low),
        "gib_per_1k_tokens": slope * 1024,
        "intercept_gib": intercept,
        "estimates": len(peaks) - given,
    }
