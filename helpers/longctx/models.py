"""Model presets (tiny Qwen3-shaped models for the CPU; full-size Qwen3 configurations written out from the published
hyperparameters, so the estimator builds them without the hub), and the one way a model is read: `load()` takes a
preset (random weights), a local path or a hub id (real weights), and never runs a model's own code."""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from longctx import device
from longctx.errors import LongctxError, check_choice
from longctx.files import json_object
from longctx.paths import user_path


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    config: dict
    hub_id: str | None = None  # where the real weights live, for users with the network


def _shape(layers: int, hidden: int, mlp: int, heads: int, kv_heads: int, head_dim: int, **more) -> dict:
    names = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    return dict(zip(names, (layers, hidden, mlp, heads, kv_heads, head_dim)), **more)


_COMMON = dict(hidden_act="silu", rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0, use_sliding_window=False)
_QWEN3 = dict(_COMMON, vocab_size=151936, max_position_embeddings=40960, bos_token_id=151643, eos_token_id=151645)
_QWEN3["rope_parameters"] = {"rope_type": "default", "rope_theta": 1_000_000.0}
# the corpus tokenizer's only special token, <|endoftext|>, is id 0
_CPU = dict(_COMMON, tie_word_embeddings=True, bos_token_id=None, eos_token_id=0, pad_token_id=0)
_CPU["rope_parameters"] = {"rope_type": "default", "rope_theta": 10_000.0}
_TINY = dict(_CPU, **_shape(2, 64, 192, 4, 2, 16))  # the body of "tiny" and "tiny-qwen-vocab"
_SMALL = dict(_CPU, **_shape(4, 128, 384, 4, 2, 32))
_DEEP = dict(_SMALL, num_hidden_layers=24)
# Llama-3.2-1B's shapes, from its public config.json: a family no preset covers, on which the estimator is held out
# (tests/test_estimate.py, benchmarks/guide_cases.py). Build it with transformers.LlamaConfig(**LLAMA_3_2_1B).
LLAMA_3_2_1B = _shape(16, 2048, 8192, 32, 8, 64, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=131072)
# Llama-3.1-8B's (public config.json), the model of ALST's paper (lesson 07)
LLAMA_3_1_8B = _shape(32, 4096, 14336, 32, 8, 128, vocab_size=128256, tie_word_embeddings=False, max_position_embeddings=131072)

# the models a recipe names by hub id that no preset stands for, by their public config.json's shapes
RECIPE_MODELS = {"meta-llama/Llama-3.1-8B": LLAMA_3_1_8B, "meta-llama/Llama-3.2-1B": LLAMA_3_2_1B}

_CPU_PRESETS = {  # name: (description, body, vocabulary, max_position_embeddings)
    "tiny": ("2 layers, hidden 64, corpus vocabulary (4,096): seconds per step on a CPU", _TINY, 4096, 2048),
    "small": ("4 layers, hidden 128, corpus vocabulary (4,096): the CPU lessons' workhorse", _SMALL, 4096, 4096),
    "deep": ("24 layers, hidden 128, corpus vocabulary: enough layers for per-layer bands to show", _DEEP, 4096, 8192),
    "tiny-qwen-vocab": ("the tiny body with Qwen3's 151,936-token vocabulary: the logits dominate", _TINY, 151936, 40960),
}
_QWEN3_SIZES = {  # the published shapes, by the size in the model's name
    "0.6B": _shape(28, 1024, 3072, 16, 8, 128),
    "4B": _shape(36, 2560, 9728, 32, 8, 128),
    "8B": _shape(36, 4096, 12288, 32, 8, 128, tie_word_embeddings=False),
}
PRESETS: dict[str, Preset] = {
    name: Preset(name, what, dict(body, vocab_size=vocab, max_position_embeddings=positions))
    for name, (what, body, vocab, positions) in _CPU_PRESETS.items()
} | {
    f"qwen3-{size.lower()}": Preset(
        f"qwen3-{size.lower()}",
        f"Qwen3-{size}: {shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}",
        {**_QWEN3, "tie_word_embeddings": True, **shape},
        f"Qwen/Qwen3-{size}",
    )
    for size, shape in _QWEN3_SIZES.items()
}

HUB_TIMEOUT = 10  # seconds the hub's address has to answer before a hub id not in the cache is refused
# "org/name" (huggingface_hub: 1 to 96 characters each); a name ending in .json is a config's path, never a hub id
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/(?![\w.-]*\.json$)[\w.-]{1,96}$")
# Training dtypes by the names notebooks and the CLI use. "bf16" is what every estimate and every guide number assumes
# (pure bf16 weights, gradients and activations; AdamW state in the weights' dtype).
DTYPE_NAMES = ("fp32", "bf16", "fp16")
_KINDS = f"a preset ({', '.join(PRESETS)}), a config.json or a model folder holding one, or a hub id such as 'Qwen/Qwen3-0.6B'"


def torch_dtype(name):
    """ "fp32" / "bf16" / "fp16" (or a torch.dtype) → the torch.dtype."""
    import torch

    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if isinstance(name, torch.dtype) and name in table.values():
        return name
    check_choice("dtype", name, DTYPE_NAMES)
    return table[name]


def dtype_name(dtype) -> str:
    """torch.bfloat16 → "bf16" (the inverse of torch_dtype)."""
    return next(n for n in DTYPE_NAMES if torch_dtype(n) == torch_dtype(dtype))


def is_preset(spec: str) -> bool:
    return spec in PRESETS


def preset(name: str) -> Preset:
    if name not in PRESETS:
        raise LongctxError(f"Unknown model preset {name!r}: use {_KINDS}.")
    return PRESETS[name]


def is_local_config(path: Path) -> bool:
    """A local model: a config.json, or a folder holding one."""
    return (path / "config.json").is_file() or (path.is_file() and path.suffix == ".json")


def cached_config(spec: str, name: str = "config.json") -> Path | None:
    """A hub id's file (its config.json) in the hub cache (huggingface_hub's own lookup), or None: not cached, or no
    hub id."""
    if not HUB_ID.match(spec) or Path(spec).exists():
        return None
    from huggingface_hub import constants, try_to_load_from_cache

    found = try_to_load_from_cache(spec, name, cache_dir=constants.HF_HUB_CACHE)
    return Path(found) if isinstance(found, str) else None


def cached_weights(spec: str) -> bool:
    """Whether the hub cache holds what from_pretrained loads of a hub id: its config and its safetensors (the index's
    every shard)."""
    if cached_config(spec) is None:
        return False
    if cached_config(spec, "model.safetensors"):
        return True
    index = cached_config(spec, WEIGHTS_INDEX)
    shards = set(((json_object(index) or {}).get("weight_map") or {}).values()) if index else set()
    return bool(shards) and all(isinstance(n, str) and cached_config(spec, n) for n in shards)


def check_fetchable(ids: dict[str, str], run: str) -> list[str]:
    """The hub ids of `ids` (id → "model", "weights" or "dataset") that are not in the hub cache (to be downloaded), refused at
    once when the hub cannot give them: HF_HUB_OFFLINE is set, or its address does not answer within a few seconds
    (the hub client would retry for half a minute, then fail in the kernel)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    cache = Path(constants.HF_HUB_CACHE)

    def held(repo: str, kind: str) -> bool:  # a model by its config.json, a dataset by any file of its snapshot
        if kind == "model":  # (a folder a failed download left, a dangling link, a README alone: not the model)
            return cached_config(repo) is not None
        if kind == "weights":  # a model a lesson trains: its weights too
            return cached_weights(repo)
        return any(f.is_file() for f in cache.glob(f"datasets--{repo.replace('/', '--')}/snapshots/*/*"))

    missing = [i for i, kind in ids.items() if not held(i, kind)]
    if not missing:
        return missing
    # read now, as the hub client does at import: a process may set it after importing huggingface_hub
    named = next((n for n in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(n)), None)  # as the hub reads them
    why = f"{named} is set" if named and constants._is_true(os.environ[named]) else None
    try:
        why or get_session().head(constants.ENDPOINT, timeout=HUB_TIMEOUT)
    except Exception as exc:  # httpx's connection errors (no route, no name, a timeout)
        why = f"{constants.ENDPOINT} cannot be reached ({type(exc).__name__}: {exc})"
    if why:
        raise LongctxError(
            f"{run} needs {', '.join(missing)} from the hub, but {why}, and the hub cache ({cache}) does not hold it. "
            "Download it first where the network is (`hf download <id>`), or name a local folder or a preset instead."
        )
    return missing


def check_spec(spec: str) -> None:
    """Refuse, without loading anything, a model that is none of: a preset, an existing config.json or model folder,
    a hub id ('org/name'). (Lesson 02's miniatures are its schema's: run/schema.py.)"""
    path = user_path(spec, "The model")
    if spec not in PRESETS and not (HUB_ID.match(spec) and not path.exists()) and not is_local_config(path):
        raise LongctxError(f"Unknown model {spec!r}: use {_KINDS}.")


READ_WHOLE_BYTES = 512 * 2**20  # weights up to this size are loaded before a run (the CPU sizes' models), larger in it
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json")  # what from_pretrained reads (`use_safetensors=True`)
WEIGHTS_INDEX = "model.safetensors.index.json"  # where a sharded model names its shards


def has_weights(path: Path) -> bool:
    """Whether a local model can be loaded with weights: a folder holding safetensors files (a config.json alone
    describes a model, for estimates; a pickled pytorch_model.bin is never loaded: unpickling can run code)."""
    return path.is_dir() and any(next(path.glob(p), None) for p in WEIGHT_FILES)


# The sizes a config must give as positive whole numbers where they are numbers (some families give lists), with caps
# at 8 × the largest released LMs (vocabulary 262,144; Llama-3.1-405B's hidden 16,384 and MLP 53,248): past them a
# config is a typo, and building its model for an estimate would run for minutes.
CONFIG_LIMITS = {"num_hidden_layers": 1024, "hidden_size": 2**17, "intermediate_size": 2**19, "vocab_size": 2**21}
CONFIG_LIMITS |= dict.fromkeys(("num_attention_heads", "num_key_value_heads", "head_dim", "moe_intermediate_size"))
# why RoPE's base (rope_theta) must be above 1: pair i turns by position × theta^(-2i/d)
ROPE_BASE_WHY = "RoPE's base: at 1 or less no pair turns slower than a radian a token, so no position is told apart"


def check_sizes(text) -> None:
    """Refuse a (text) config whose sizes are not positive whole numbers or are past CONFIG_LIMITS."""
    for name, limit in CONFIG_LIMITS.items():
        value = getattr(text, name, None)
        if not isinstance(value, (int, float)):
            continue  # absent, None, a per-layer list
        if isinstance(value, bool) or not value >= 1 or value % 1 or (limit and value > limit):
            why = f"over the {limit:,} longctx takes" if limit and value > limit else "not a positive whole number"
            raise LongctxError(f"The config's {name} is {value:,}: {why}; fix config.json.")
    heads, kv = getattr(text, "num_attention_heads", None), getattr(text, "num_key_value_heads", None)
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:  # grouped queries: whole groups (torch's repeat)
        raise LongctxError(f"The config's num_attention_heads {heads} is not a multiple of its num_key_value_heads {kv}; "
                           "fix config.json.")  # fmt: skip


def check_weights(path: Path) -> None:
    """Refuse, before a kernel, a model folder whose weights transformers would load wrongly: `load`'s own check,
    for folders of up to READ_WHOLE_BYTES (a larger one is checked the same way when a lesson loads it)."""
    from transformers.utils import logging as hf_logging

    config(str(path))  # its sizes first: a typo of 70,000 layers would take minutes to build
    if sum(f.stat().st_size for f in Path(path).glob("*.safetensors")) <= READ_WHOLE_BYTES:
        shown, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()  # a check says nothing unless it refuses (transformers' load report too)
        hf_logging.set_verbosity_error()
        try:
            load(str(path))
        finally:
            hf_logging.set_verbosity(level)
            if shown:
                hf_logging.enable_progress_bar()


def check_tokenizer(path: Path) -> None:
    """Refuse a model folder whose tokenizer the lessons cannot load as they load it (`AutoTokenizer.from_pretrained`),
    or one giving token ids past the vocabulary its config.json builds (the embedding would be indexed out of range)."""
    from transformers import AutoTokenizer

    try:
        tok = from_pretrained(AutoTokenizer, str(path))
    except LongctxError:
        raise
    except Exception as exc:  # transformers' own word for what it lacks
        raise LongctxError(f"{path} holds no tokenizer transformers can load ({type(exc).__name__}: {_said(exc)}). Save the "
                           "model's tokenizer beside it (tokenizer.save_pretrained(folder)).") from None  # fmt: skip
    if not any((Path(path) / name).is_file() for name in tok.vocab_files_names.values()):  # transformers built an empty one
        raise LongctxError(f"{path} holds no tokenizer ({', '.join(tok.vocab_files_names.values())}): save the model's "
                           "tokenizer beside it (tokenizer.save_pretrained(folder)): lessons read text through it.")  # fmt: skip
    vocabulary = getattr(config(str(path)).get_text_config(), "vocab_size", None) if is_local_config(path) else None
    if isinstance(vocabulary, int) and len(tok) > vocabulary:
        raise LongctxError(
            f"{path} has a tokenizer of {len(tok):,} tokens, but its config.json builds a vocabulary of {vocabulary:,}: "
            "ids past it would index the embedding out of range. The tokenizer is another model's, or the config is."
        )


def _said(exc: Exception, most: int = 240) -> str:
    return " ".join(str(exc).split())[:most]


def from_pretrained(cls, source, **kwargs):
    """`cls.from_pretrained(source)` (a transformers Auto class) that never runs a model's own Python code
    (`trust_remote_code=False`: transformers refuses a model that needs it, and asks nothing on standard input)."""
    try:
        return cls.from_pretrained(source, trust_remote_code=False, **kwargs)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise LongctxError(
                f"The model {source} needs its own Python code; longctx never runs a model's code (trust_remote_code="
                "False). Use a model transformers implements itself (Qwen3, Llama, Mistral, Gemma, …)."
            ) from None
        raise


# a decoder's width under the names its families' config.json files use (a multimodal one nests it in text_config)
SIZE_KEYS = {"hidden_size", "n_embd", "n_embed", "d_model", "text_config"}


def config(spec: str, **overrides):
    """A transformers config for a preset name, a config.json / model folder, or a hub id."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, Qwen3Config
    from transformers.configuration_utils import PreTrainedConfig

    if spec in PRESETS:
        try:
            return Qwen3Config(**{**PRESETS[spec].config, **overrides})
        except (TypeError, ValueError, StrictDataclassError) as exc:  # transformers' own checks (a strict dataclass)
            raise LongctxError(f"Cannot build {spec} with {overrides}: {_said(exc, 300)}") from None
    path = user_path(spec, "The model")
    twin = {p.hub_id: f" Without the network, the preset {p.name!r} has its shape." for p in PRESETS.values()}.get(spec, "")
    if not path.exists() and not HUB_ID.match(spec):
        if path.suffix == ".json" or spec.startswith((".", "/", "~")):
            raise LongctxError(f"No model config at {spec} (nothing is there): use {_KINDS}.")
        preset(spec)  # raises with the list of presets
    given = path / "config.json" if path.is_dir() else path if path.exists() else cached_config(spec) or path
    loaded = json_object(given) if given.suffix == ".json" else None
    if loaded is not None and not SIZE_KEYS & set(loaded):  # transformers would fill in its class's defaults (a 7B Llama)
        raise LongctxError(
            f"{spec}'s config.json names no size ({', '.join(sorted(SIZE_KEYS))}): transformers would fill in its defaults and "
            "the estimate would be of a model you did not describe. Give the model's whole config.json."
        )
    try:
        if not path.exists():
            check_fetchable({spec: "model"}, "Reading the model's config")
        source = str(path.parent if path.name == "config.json" else path) if path.exists() else spec
        cfg = from_pretrained(AutoConfig, source, **overrides)
    except LongctxError as exc:
        raise LongctxError(f"{exc}{twin}") from None
    except Exception as exc:  # malformed JSON, an unknown model_type, a field of the wrong type, the hub failing
        raise LongctxError(f"Cannot read a model config from {spec}: {type(exc).__name__}: {_said(exc, 300)}{twin}") from None
    if not isinstance(cfg.get_text_config(), PreTrainedConfig):  # a text_config its family does not declare
        raise LongctxError(f"{spec}'s text_config is a plain set of settings, which a {cfg.model_type} config never builds.")
    check_sizes(cfg.get_text_config())
    return cfg


def load(spec: str, *, dtype="fp32", seed: int = 0, **overrides):
    """A causal LM in `dtype` ("fp32", "bf16", "fp16" or a torch.dtype): a preset gets random weights (seeded); a path
    or hub id loads its weights with `from_pretrained` (on the CPU; the trainer moves it to the accelerator), refused by
    transformers' own loading report when they are not the model's: a weight it needs that no file holds (it would start
    random), one the config does not build (dropped), one of another shape; and integer (quantized) or NaN weights."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch_dtype(dtype)
    if spec in PRESETS:
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config(spec, **overrides), dtype=dtype)
    if not (Path(spec).exists() or HUB_ID.match(spec)):
        preset(spec)  # raises with the list of presets
    try:
        model, report = from_pretrained(
            AutoModelForCausalLM, spec, dtype=dtype, use_safetensors=True, output_loading_info=True, **overrides
        )
    except (LongctxError, MemoryError):
        raise
    except Exception as exc:  # a shard missing, another shape than the config's (transformers' own report), ...
        raise LongctxError(f"{spec}: transformers cannot load it as lessons do ({type(exc).__name__}: {_said(exc)})") from None
    if wrong := sorted(report["missing_keys"]) or sorted(report["unexpected_keys"]):
        how = "no file holds (it would start random)" if report["missing_keys"] else "its config does not build (dropped)"
        raise LongctxError(f"{spec}: {wrong[0]} ({len(wrong)} tensor(s)) is a weight {how}: the weights are another model's, "
                           "or the config is. Save the two together (save_pretrained).")  # fmt: skip
    if bad := next((n for n, w in model.named_parameters() if not (w.is_floating_point() and w.isfinite().all())), None):
        raise LongctxError(f"{spec}'s weight {bad} is quantized, NaN or infinite: give the model's bf16 or fp32 weights.")
    return model


def offline_config(hub_id: str):
    """The config of a model a recipe names by hub id, built here without the network: a Qwen3 preset's, or
    RECIPE_MODELS'."""
    from transformers import LlamaConfig

    by_id = {p.hub_id: p.name for p in PRESETS.values() if p.hub_id}
    return config(by_id[hub_id]) if hub_id in by_id else LlamaConfig(**RECIPE_MODELS[hub_id])


def shown(spec: str) -> str:
    """A model as a lesson names it in its output: a local folder by its name (no machine path), else as given."""
    return Path(spec).name if Path(spec).exists() else spec


def to_device(model):
    """`model` on this machine's accelerator (the CUDA device torch has current), or left on the CPU."""
    return model if device() == "cpu" else model.to(device())


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())
