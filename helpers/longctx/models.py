"""Model presets (tiny Qwen3-shaped models for the CPU; full-size Qwen3 configurations written out from the published
hyperparameters, so the estimator builds them without the hub), and the one way a model is read: `load()` takes a
preset (random weights), a local path or a hub id (real weights), and never runs a model's own code."""

import contextlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from longctx import device
from longctx.errors import LongctxError, check_choice
from longctx.files import json_object
from longctx.paths import MINIATURES, user_path


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
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")  # "org/name" (huggingface_hub: 1 to 96 characters each)
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


def _check_not_empty(spec) -> None:
    if not isinstance(spec, str) or not spec.strip():
        raise LongctxError(f"The model is {spec!r}: name {_KINDS}.")


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


def _check_config_file(given: Path) -> None:
    """A config file that is named but cannot be read as one: a link to nothing or a loop, a device, a FIFO, a folder."""
    if given.is_symlink() and not given.exists():
        raise LongctxError(f"{given} is a link to nothing (or a loop of links): restore the model's config.json.")
    if given.exists() and not given.is_file():
        raise LongctxError(f"{given} is not a regular file: a model's config.json is a JSON file of its settings.")


def check_spec(spec: str, *, allow_base: bool = False) -> None:
    """Refuse, without loading anything, a model that is none of: a preset, an existing config.json or model folder,
    a hub id ('org/name'), or (notebook 02) one of the lessons' miniatures ("base", "retrieval")."""
    _check_not_empty(spec)
    path = user_path(spec, "The model")
    if spec in PRESETS or (allow_base and spec in MINIATURES) or (HUB_ID.match(spec) and not path.exists()):
        return
    _check_config_file(path / "config.json")
    if not is_local_config(path):
        ours = f", or one of the lessons' own: {', '.join(map(repr, MINIATURES))}." if allow_base else "."
        raise LongctxError(f"Unknown model {spec!r}: use {_KINDS}{ours}")
    refuse_custom_code(path)


READ_WHOLE_BYTES = 512 * 2**20  # weight files up to this size are read whole before a run (the CPU sizes' models)
# what from_pretrained reads here (`use_safetensors=True`): a pickled pytorch_model.bin can run code when it is loaded
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json")
WEIGHTS_INDEX = "model.safetensors.index.json"  # where a sharded model names its shards


def has_weights(path: Path) -> bool:
    """Whether a local model can be loaded with weights: a folder holding weight files (a config.json alone describes
    a model, for estimates; a preset's weights are random, a hub id's come with it)."""
    return path.is_dir() and any(next(path.glob(p), None) for p in WEIGHT_FILES)


# The sizes a config must give as positive whole numbers where they are numbers (some families give lists), with caps
# at 8 × the largest released LMs (vocabulary 262,144; Llama-3.1-405B's hidden 16,384 and MLP 53,248): past them a
# config is a typo, and building its model (the estimate's trace, the weight check's shapes) would run for minutes.
# (Checked by hand, not with jsonschema: importing it can cost seconds.)
CONFIG_LIMITS = {"num_hidden_layers": 1024, "hidden_size": 2**17, "intermediate_size": 2**19, "vocab_size": 2**21}
CONFIG_LIMITS |= dict.fromkeys(
    ("num_attention_heads", "num_key_value_heads", "head_dim", "moe_intermediate_size", "sliding_window")
)


MAX_EXPERTS = 4096  # the same 8 × the most a released model routes among (Qwen3-Next's 512)
# why RoPE's base (rope_theta) must be above 1: pair i turns by position × theta^(-2i/d)
ROPE_BASE_WHY = "RoPE's base: at 1 or less no pair turns slower than a radian a token, so no position is told apart"


def check_sizes(text) -> None:
    """Refuse a (text) config whose sizes are not positive whole numbers or are past CONFIG_LIMITS."""
    for name, limit in CONFIG_LIMITS.items():
        value = getattr(text, name, None)
        if not isinstance(value, (int, float)) or (name == "sliding_window" and value == 0):
            continue  # absent, None, a per-layer list; a window of 0 is "none" (transformers sets it so for Qwen2-MoE)
        if isinstance(value, bool) or not value >= 1 or value % 1 or (limit and value > limit):
            why = f"over the {limit:,} longctx takes" if limit and value > limit else "not a positive whole number"
            raise LongctxError(f"The config's {name} is {value:,}: {why}; fix config.json.")
    for name in (
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
    ):  # (0 is a dense model's in some families: the estimate's to judge)
        if isinstance(experts := getattr(text, name, None), int) and experts > MAX_EXPERTS:
            raise LongctxError(f"The config's {name} is {experts:,}: over the {MAX_EXPERTS:,} longctx takes; fix config.json.")
    rope = getattr(text, "rope_parameters", None)  # (a dict per layer type in some families: its own bases, unread)
    theta = rope.get("rope_theta") if isinstance(rope, dict) else getattr(text, "rope_theta", None)
    factor = rope.get("factor") if isinstance(rope, dict) else None  # YaRN's and linear scaling's stretch
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and not factor > 0:
        raise LongctxError(f"The config's rope_parameters factor is {factor!r}: it must be positive; fix config.json.")
    if isinstance(theta, (int, float)) and not isinstance(theta, bool) and not theta > 1:
        raise LongctxError(f"The config's rope_theta is {theta!r}: it must be above 1 ({ROPE_BASE_WHY}); fix config.json.")


def check_weights(path: Path) -> None:
    """Refuse, reading the headers (and the numbers of files up to READ_WHOLE_BYTES), a model folder whose weights
    transformers would load wrongly or stop loading half-way, in the kernel: a safetensors file that is not one (or a
    link to nothing), a tensor of another shape than its config.json builds, integer (quantized) tensors, a weight
    the model needs that no file it reads holds (transformers would leave it random), a shard the index names that
    is missing, NaN or infinite numbers. Checked once per state of the folder's files (a sweep checks every point's
    parameters)."""
    check_entries(path)
    files = sorted(p for p in path.iterdir() if p.name == "config.json" or p.name.endswith((".safetensors", ".index.json")))
    _check_weights(path, tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@lru_cache(maxsize=32)
def _check_weights(path: Path, state: tuple) -> None:
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    cfg = config(str(path))
    check_sizes(cfg.get_text_config())  # before building: 70,000 layers took 90 s on the meta device
    try:
        with torch.device("meta"):  # the shapes alone
            net = AutoModelForCausalLM.from_config(cfg)
    except Exception:  # a config transformers builds no causal LM from: the lesson's own loading names it
        return
    wanted = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    shared = {}  # tied weights (the head and the embedding): one of them in the files is enough
    for name, tensor in net.named_parameters(remove_duplicate=False):
        shared.setdefault(id(tensor), []).append(name)
    # the files transformers 5.24 reads (modeling_utils._get_resolved_checkpoint_files, use_safetensors): the file the
    # config names (transformers_weights), else model.safetensors alone, else the index's shards, each holding the
    # tensors it maps to it; another safetensors file beside them (an index beside model.safetensors too) is never read
    named = getattr(cfg, "transformers_weights", None)
    if named is not None and not (
        isinstance(named, str) and named.endswith((".safetensors", ".safetensors.index.json")) and (path / named).parent == path
    ):
        raise LongctxError(
            f"{path / 'config.json'} names {named!r} as its weights (transformers_weights), but transformers loads only a "
            "*.safetensors or *.safetensors.index.json file beside it: remove that field, or name such a file."
        )
    chosen = path / (named or ("model.safetensors" if (path / "model.safetensors").exists() else WEIGHTS_INDEX))
    mapped = {}
    if chosen.name.endswith(".safetensors.index.json") and chosen.exists():
        mapped = (json_object(chosen) or {}).get("weight_map")
        if not (isinstance(mapped, dict) and mapped and all(isinstance(v, str) for v in mapped.values())):
            raise LongctxError(
                f"{chosen} does not map tensor names to shard files (its weight_map), which is what transformers reads "
                "it for: save the model again (save_pretrained)."
            )
        if missing := sorted(n for n in set(mapped.values()) if not (path / n).is_file()):
            raise LongctxError(f"{chosen} names {missing[0]}, which is not in {path}: copy the model's every shard.")
    elif named and not chosen.exists():
        raise LongctxError(f"{path / 'config.json'} names {named} as its weights (transformers_weights), which is not in {path}.")
    elif not chosen.exists():
        raise LongctxError(
            f"{path} holds safetensors files but neither model.safetensors nor {WEIGHTS_INDEX}, the ones "
            "transformers loads: save the model with save_pretrained."
        )
    found = {}
    for file in sorted({path / n for n in mapped.values()} if mapped else [chosen]):
        try:
            if not file.is_file():  # a FIFO would block the read
                raise OSError("not a regular file")
            with safe_open(file, "pt") as weights:
                here = {name: weights.get_slice(name) for name in weights.keys()}
                here = {name: (tuple(s.get_shape()), s.get_dtype()) for name, s in here.items()}
                small = file.stat().st_size <= READ_WHOLE_BYTES  # read whole here: a NaN would otherwise train unseen
                floats = [n for n in here if here[n][1].startswith(("F", "BF"))]
                bad = next((n for n in floats if not weights.get_tensor(n).isfinite().all()), None) if small else None
        except Exception as exc:  # safetensors' own error types
            raise LongctxError(f"{file} cannot be read as safetensors ({exc}); save the model again (save_pretrained).") from None
        if bad:
            raise LongctxError(f"{file}: {bad} holds NaN or infinite numbers: the model is damaged; save a sound one.")
        if wrong := [n for n in here if n in wanted and here[n][0] != wanted[n]]:
            raise LongctxError(
                f"{file}: {wrong[0]} is {list(here[wrong[0]][0])}, but {path / 'config.json'} builds {list(wanted[wrong[0]])} "
                f"({len(wrong)} tensor(s) differ): the weights are another model's, or the config is. Save them together."
            )
        if whole := [n for n in here if n in wanted and not here[n][1].startswith(("F", "BF"))]:
            raise LongctxError(
                f"{file}: {whole[0]} holds {here[whole[0]][1]} numbers, not floating point: quantized weights are not "
                "trained here. Give the model's bf16 or fp32 weights."
            )
        found |= {n: v for n, v in here.items() if not mapped or mapped.get(n) == file.name}  # where the index says
    ignored = [re.compile(p) for p in getattr(net, "_keys_to_ignore_on_load_unexpected", None) or ()]
    if extra := [n for n in found if n not in wanted and not any(p.search(n) for p in ignored)]:  # e.g. layers cut
        raise LongctxError(
            f"{path}'s safetensors hold {extra[0]} ({len(extra)} tensor(s)), which {path / 'config.json'} does not build: "
            "transformers would drop them and train a smaller model than was saved. The config is another model's; "
            "save the two together (save_pretrained)."
        )
    missing = [g[0] for g in shared.values() if not any(n in found for n in g)]  # (buffers: a model recomputes them)
    if missing:
        raise LongctxError(
            f"{path}'s safetensors hold no {missing[0]} ({len(missing)} tensor(s) missing): transformers would start "
            "them from random numbers. Save the whole model (save_pretrained)."
        )
    if sum(f.stat().st_size for f in path.glob("*.safetensors")) <= READ_WHOLE_BYTES:
        _check_forward(path)


def _check_forward(path: Path, tokens: int = 16) -> None:
    """Refuse weights that are finite but overflow: the model, loaded as the lessons load it, must give a finite loss
    and finite gradients on one step of a few tokens (in fp32, whose range bf16 shares)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a check says nothing unless it refuses
    try:
        net = from_pretrained(AutoModelForCausalLM, str(path), dtype=torch.float32)
        ids = torch.arange(tokens)[None] % net.get_input_embeddings().num_embeddings
        loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
    except (LongctxError, MemoryError):
        raise
    except Exception as exc:  # what the lesson would meet in the kernel: an adapter, a quantizer, ...
        why = " ".join(str(exc).split())[:240]
        raise LongctxError(
            f"{path}: transformers cannot load and step it as the lessons do ({type(exc).__name__}: {why})."
        ) from None
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    if not (loss.isfinite() and all(p.grad.isfinite().all() for p in net.parameters() if p.grad is not None)):
        name, weight = max(net.named_parameters(), key=lambda p: p[1].detach().abs().max())
        what, largest = "gradient" if loss.isfinite() else "loss", weight.detach().abs().max().item()
        raise LongctxError(
            f"{path}: one training step on {tokens} tokens gives an infinite or NaN {what}, though every weight is finite: "
            f"they are too large ({name} holds {largest:.3g}) and overflow. The model is damaged; save a sound one."
        )


def check_entries(path: Path) -> None:
    """Refuse a model folder holding a link to nothing, a FIFO or a device: a reader of its files would fail on it, or
    wait on it for ever."""
    if odd := next((p for p in sorted(path.iterdir()) if not (p.is_file() or p.is_dir())), None):
        why = "a link to nothing (or a loop of links)" if not odd.exists() else "not a regular file"
        raise LongctxError(f"{odd} is {why}; a model folder holds what save_pretrained wrote: restore it, or remove it.")


def check_tokenizer(path: Path) -> None:
    """Refuse a model folder whose tokenizer the lessons cannot load as they load it (`AutoTokenizer.from_pretrained`):
    none there, a tokenizer.json the tokenizers library cannot read, or one giving token ids past the vocabulary its
    config.json builds (the embedding would be indexed out of range, in the kernel)."""
    check_entries(path)
    _check_tokenizer(path, tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.iterdir()) if p.is_file()))


@lru_cache(maxsize=32)
def _check_tokenizer(path: Path, state: tuple) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    file = path / "tokenizer.json"
    try:
        if file.exists():  # the tokenizers library names what is wrong with it; transformers' wrapper would not
            Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers library's own errors (Rust), or the file's
        why = " ".join(str(exc).split())[:160]
        raise LongctxError(f"{file} cannot be read as a tokenizer ({why}): restore it, or save the tokenizer again.") from None
    try:
        tok = from_pretrained(AutoTokenizer, str(path))
    except LongctxError:
        raise
    except Exception as exc:  # transformers' own word for what it lacks
        why = " ".join(str(exc).split())[:200]
        raise LongctxError(
            f"{path} holds no tokenizer transformers can load ({type(exc).__name__}: {why}). Save the model's tokenizer "
            "beside it (tokenizer.save_pretrained(folder)): the lessons read text through it."
        ) from None
    if not any((path / name).is_file() for name in tok.vocab_files_names.values()):  # transformers built an empty one
        raise LongctxError(
            f"{path} holds no tokenizer: {type(tok).__name__} reads its vocabulary from "
            f"{', '.join(tok.vocab_files_names.values())}, and none is there. Save the model's tokenizer beside it "
            "(tokenizer.save_pretrained(folder)): the lessons read text through it."
        )
    size, vocabulary = (
        len(tok),
        getattr(config(str(path)).get_text_config(), "vocab_size", None) if is_local_config(path) else None,
    )
    if isinstance(vocabulary, int) and size > vocabulary:
        raise LongctxError(
            f"{path} has a tokenizer of {size:,} tokens, but {path / 'config.json'} builds a vocabulary of {vocabulary:,}: "
            "ids past it would index the embedding out of range. The tokenizer is another model's, or the config is."
        )


def from_pretrained(cls, source, **kwargs):
    """`cls.from_pretrained(source)` (a transformers Auto class) that never runs a model's own Python code:
    `trust_remote_code=False` (transformers then asks nothing on standard input), and a local folder that maps
    classes to its own files (`auto_map`) is refused before transformers reads it."""
    refuse_custom_code(source)
    try:
        return cls.from_pretrained(source, trust_remote_code=False, **kwargs)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            _refuse_custom_code(source, "it needs code from its repository")
        raise


def refuse_custom_code(source) -> None:
    """Refuse a local model whose config.json or tokenizer_config.json names classes in its own files."""
    given = Path(source)
    folder = given.parent if given.is_file() else given
    # the file itself when it is one (a config named otherwise, e.g. llama.json), and the folder's two
    for path in ([given] if given.is_file() else []) + [folder / "config.json", folder / "tokenizer_config.json"]:
        if "auto_map" in (json_object(path) or {}):  # (a damaged file is transformers' to name)
            _refuse_custom_code(source, f"its {path.name} maps classes to the folder's own files (auto_map)")


def _refuse_custom_code(source, why: str):
    raise LongctxError(
        f"The model {source} needs its own Python code ({why}); longctx never runs a model's code (trust_remote_code=False). "
        "Use a model transformers implements itself (Qwen3, Llama, Mistral, Gemma, …), or a config.json without auto_map."
    )


# a decoder's width under the names its families' config.json files use (a multimodal one nests it in text_config)
SIZE_KEYS = {"hidden_size", "n_embd", "n_embed", "d_model", "text_config"}


def _check_sized(settings: dict, name: str) -> None:
    if not SIZE_KEYS & set(settings):  # transformers would fill in its class's defaults (a 7B Llama, say)
        raise LongctxError(
            f"{name} names no size ({', '.join(sorted(SIZE_KEYS))}): transformers would fill in its own defaults and "
            "the estimate would be of a model you did not describe. Give the model's whole config.json."
        )


def _check_settings(loaded: dict, given: Path) -> None:
    """The settings of a config.json checked before transformers reads them: its own checks stop at a model family it
    does not know, or a size that is not a number, in words that name no fix."""
    import difflib

    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    family = loaded.get("model_type")
    if isinstance(family, str) and family not in CONFIG_MAPPING and "auto_map" not in loaded:  # (its own code: refused)
        close = difflib.get_close_matches(family, list(CONFIG_MAPPING.keys()), n=1)
        raise LongctxError(
            f"{given}: model_type {family!r} is no model family transformers {transformers.__version__} builds"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + ". Fix model_type; a family newer than this transformers needs a newer one."
        )
    for settings in (loaded, loaded.get("text_config")):  # (a multimodal model's sizes are its text model's)
        if isinstance(settings, dict):
            check_sizes(SimpleNamespace(**settings))


def config(spec: str, **overrides):
    """A transformers config for a preset name, a config.json / model folder, or a hub id."""
    from transformers import AutoConfig, Qwen3Config
    from transformers.configuration_utils import PreTrainedConfig

    _check_not_empty(spec)
    if spec in PRESETS:
        return Qwen3Config(**{**PRESETS[spec].config, **overrides})
    path = user_path(spec, "The model")
    given = path / "config.json" if path.is_dir() else path
    _check_config_file(given)
    if not path.exists():
        if path.suffix == ".json" or spec.startswith((".", "/", "~")):
            raise LongctxError(f"No model config at {spec} (nothing is there): use {_KINDS}.")
        if not HUB_ID.match(spec):
            preset(spec)  # raises with the list of presets
    if path.is_dir() and not given.exists():
        raise LongctxError(
            f"The model folder {spec} has no config.json: give the folder a model was saved into (save_pretrained "
            "writes config.json beside the weights), the config.json itself, a preset or a hub id."
        )
    try:
        loaded = json.loads(given.read_text()) if given.is_file() and given.suffix == ".json" else {}
    except RecursionError:  # nested past what any reader of it (transformers' included) can follow
        raise LongctxError(f"{given} is nested too deeply to read: a model's config.json is one object of settings.") from None
    except (OSError, UnicodeDecodeError, ValueError):
        loaded = {}  # transformers' own reading names what is wrong with it
    if not isinstance(loaded, dict):
        raise LongctxError(
            f"{spec} holds a JSON {type(loaded).__name__}, not an object: a model's config.json is one object of "
            'settings ({"model_type": ..., "hidden_size": ...}).'
        )
    if loaded:
        _check_sized(loaded, str(given))
        _check_settings(loaded, given)
    source = str(path.parent if path.name == "config.json" else path) if path.exists() else spec
    twin = {p.hub_id: f" Without the network, the preset {p.name!r} has its shape." for p in PRESETS.values()}.get(spec, "")
    try:
        if not path.exists():
            check_fetchable({spec: "model"}, "Reading the model's config")
            settings = {}
            with contextlib.suppress(Exception):  # (what it cannot read, from_pretrained names below)
                settings = PreTrainedConfig.get_config_dict(spec)[0]
            _check_sized(settings or {"hidden_size": None}, f"{spec}'s config.json")
        cfg = from_pretrained(AutoConfig, source, **overrides)
        if not isinstance(cfg.get_text_config(), PreTrainedConfig):  # a text_config its family does not declare
            raise LongctxError(
                f"{spec}'s text_config is a plain set of settings: a {cfg.model_type} config is no multimodal one, so "
                "transformers never builds it. Move its settings to the top level, or remove it."
            )
        return cfg
    except LongctxError as exc:
        raise LongctxError(f"{exc}{twin}") from None
    except Exception as exc:  # malformed JSON, unknown model_type, a field of the wrong type, the hub failing
        raise LongctxError(
            f"Cannot read a model config from {spec}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}{twin}"
        ) from None


def load(spec: str, *, dtype="fp32", seed: int = 0, **overrides):
    """A causal LM in `dtype` ("fp32", "bf16", "fp16" or a torch.dtype): a preset gets random weights (seeded); a
    path or hub id loads its weights with `from_pretrained` (on the CPU; the trainer moves it to the accelerator)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch_dtype(dtype)
    if spec in PRESETS:
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config(spec, **overrides), dtype=dtype)
    if not (Path(spec).exists() or HUB_ID.match(spec)):
        preset(spec)  # raises with the list of presets
    model = from_pretrained(AutoModelForCausalLM, spec, dtype=dtype, use_safetensors=True, **overrides)
    if bad := next((name for name, w in model.named_parameters() if not w.isfinite().all()), None):  # it trains on NaN
        raise LongctxError(f"{spec}'s weight {bad} holds NaN or infinite numbers: the model is damaged; save a sound one.")
    return model


def to_device(model):
    """`model` on this machine's accelerator (the CUDA device torch has current), or left on the CPU."""
    return model if device() == "cpu" else model.to(device())


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())
