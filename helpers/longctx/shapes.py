"""What a sequence's layout admits under context and sequence parallelism: the padded length, the
attention kinds of a config, and the plan check every CP/SP entry point shares."""

from longctx.errors import LongctxError, check_positive_int

# 8 nodes of 8: a CP estimate traces each step of the ring, so its time grows with the ranks
MAX_CP = 64


def padded_length(seq_len: int, cp_size: int) -> int:
    """The next length CP accepts: a multiple of 2·cp_size."""
    step = 2 * cp_size
    return -(-seq_len // step) * step


def attention_kinds(cfg) -> set[str]:
    """The attention kinds a config's layers use ("full_attention", "sliding_attention", ...)."""
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    layer_types = getattr(cfg, "layer_types", None)
    kinds = set(layer_types or ["full_attention"])
    # Mistral-style configs have only `sliding_window` (then every layer slides); Qwen-style ones also a
    # `use_sliding_window` switch
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        kinds = kinds | {"sliding_attention"} if layer_types else {"sliding_attention"}
    if getattr(cfg, "attention_chunk_size", None):
        kinds.add("chunked_attention")
    return kinds


def check_plan(cfg, seq_len: int, *, cp_size: int = 1, sp_size: int = 1) -> None:
    """Refuse what CP/SP cannot run, naming the fix."""
    for name, value in (("seq_len", seq_len), ("cp_size", cp_size), ("sp_size", sp_size)):
        check_positive_int(name, value)
    if cp_size > 1 and sp_size > 1:
        raise LongctxError(
            f"cp_size={cp_size} with sp_size={sp_size}: accelerate runs torch context parallelism (FSDP2) or DeepSpeed "
            "Ulysses, not both in one run; choose one of them."
        )
    if cp_size > MAX_CP:
        raise LongctxError(f"cp_size={cp_size}: longctx models context parallelism over at most {MAX_CP} GPUs; pick fewer.")
    if cp_size > 1:
        if seq_len % (2 * cp_size):  # (a multiple of 2 × cp_size holds a token a chunk, at least)
            raise LongctxError(
                f"seq_len={seq_len} is not a multiple of 2 × cp_size = {2 * cp_size}: pad to "
                f"{padded_length(seq_len, cp_size)} (pad_to_multiple_of={2 * cp_size})."
            )
        other = attention_kinds(cfg) - {"full_attention"}
        if other:
            raise LongctxError(
                f"This model has {', '.join(sorted(other))} layers; context parallelism supports full causal attention "
                "only. Use a model without sliding-window/chunked layers, or Ulysses sequence parallelism (sp_size) instead."
            )
    if sp_size > 1:
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        heads, kv = text.num_attention_heads, text.num_key_value_heads
        # DeepSpeed 0.19.8 (runtime/sequence_parallel/ulysses_sp.py) splits the query heads evenly, and the KV heads
        # too, or replicates them when sp_size is a multiple of their count (the guide's "at most the KV heads" is older)
        if heads % sp_size or (kv % sp_size and sp_size % kv):
            fits = [n for n in range(1, heads + 1) if heads % n == 0 and (kv % n == 0 or n % kv == 0)]
            raise LongctxError(
                f"sp_size={sp_size} must divide the model's {heads} attention heads and divide, or be a multiple of, its "
                f"{kv} KV heads (Ulysses splits heads): use one of {fits}, or context parallelism for more ranks."
            )
