"""The guide's numbers, in one place. "The guide" is the TRL page "Training Beyond 1M Tokens"
(huggingface.co/docs/trl/en/long_context_training) with TRL's example `examples/sft_qwen3_8b_1m_context`, whose memory
figures are peaks on 80 GB GPUs."""

from dataclasses import dataclass

_TRACED = (
    "the estimate traces the same training step on fake tensors; what it leaves out (the CUDA context, "
    "allocator rounding, NCCL buffers) is a few percent of a card"
)
_CP = _TRACED + "; under CP also the ring's communication buffers, which vary by backend"


@dataclass(frozen=True)
class Figure:
    value: float
    what: str
    rel: float | None = None  # how close longctx's number is held to it in the tests; None: shown, not tested
    why: str = ""  # the reason for that tolerance
    source: str = "guide"  # who published it (ALST's paper, for the figures past the guide)


QWEN3_4B_FIXED = Figure(22, "Qwen3-4B: weights and AdamW state in bf16 (GB)", 0.05, "arithmetic; the guide rounds it")
QWEN3_4B_96K = Figure(59.9, "Qwen3-4B, 98,304 tokens, chunked loss + checkpointing, one GPU: peak (GB)", 0.05, _TRACED)
QWEN3_4B_96K_OFFLOAD = Figure(48.8, "the same step with the checkpointed layer inputs offloaded (GB)", 0.05, _TRACED)
QWEN3_4B_96K_BANDS = Figure(38, "bands of one saved 98,304 × 2560 input in that step's profile (36 layers + 2)")
QWEN3_4B_96K_BAND = Figure(0.47, "one such band: 98,304 × 2560 × 2 bytes (GB)", 0.02, "arithmetic; the guide rounds it")
PLAIN_OOM = Figure(32768, "Qwen3-4B with the plain loss: out of memory on 80 GB near this length (tokens)")
REACH_CHUNKED = Figure(163840, "Qwen3-4B, chunked loss + checkpointing: the longest that fits 80 GB, ~160k (tokens)")
REACH_OFFLOAD = Figure(262144, "... with activation offload: 256k (tokens)")
QWEN3_4B_1M_CP4 = Figure(63.6, "Qwen3-4B, 1,048,576 tokens, offload, context parallel over 4 GPUs: per-GPU peak (GB)", 0.10, _CP)
QWEN3_8B_1M_CP8 = Figure(
    56.0, "Qwen3-8B, 1,048,576 tokens, offload, CP over 8 GPUs, the example's mixed precision: per-GPU peak (GB)", 0.10, _CP
)
NAIVE_8B_1M = Figure(
    288,
    "Qwen3-8B, 1,048,576 tokens: one saved input per layer on one GPU, 36 × 1M × 4096 × 2 bytes (GB, the guide's naive count)",
    0.01,
    "arithmetic",
)
MLP_INTERMEDIATE_1M = Figure(19, "Qwen3-4B at 1,048,576 tokens: one MLP intermediate (GB)")
MLP_FOUR_1M = Figure(76, "... four of them alive at once in one layer's backward (GB)", 0.01, "arithmetic")
# Past the guide: ALST (Bekman et al. 2025, arXiv:2506.13996), Llama-3.1-8B with TiledMLP, tiled loss, checkpoint offload
ALST_ONE_GPU = Figure(500_000, "Llama-3.1-8B on one 80 GB H100: the longest trained sequence (tokens)", source="ALST")
ALST_ONE_NODE = Figure(3_700_000, "... on one node of 8 H100s, with Ulysses sequence parallelism (tokens)", source="ALST")
# ALST's measured iteration times (its evaluation table), FlashAttention-2 on H100s: what the time model is held to
ALST_ONE_GPU_SECONDS = Figure(1010, "Llama-3.1-8B, 500K tokens, one H100, ALST's one-GPU stack: seconds per iteration",
                              source="ALST")  # fmt: skip
ALST_SP8_SECONDS = {  # Ulysses over one node of 8 H100s
    n: Figure(s, f"Llama-3.1-8B, {n / 1e6:.1f}M tokens, Ulysses over 8 H100s: seconds per iteration", source="ALST")
    for n, s in ((1_100_000, 564), (2_400_000, 2610))
}
ALST_BASELINE_SECONDS = Figure(26, "Llama-3.1-8B, 32K tokens, one H100, ZeRO-3 with the optimizer and weights on the host "
                               "(ALST's baseline): seconds per iteration", source="ALST")  # fmt: skip
# the guide's step times of Qwen3 at 131k tokens with context parallelism, by the number of GPUs
CP_STEP_SECONDS_131K = {
    n: Figure(s, f"CP over {n} GPUs, 131k tokens: seconds per step") for n, s in ((2, 34.6), (4, 17.8), (8, 9.5))
}
LAST_STRETCH_PLAIN = Figure(7.3, "Qwen3, last 20k of 160k tokens, no rescaling: mean per-token loss (nats)")
LAST_STRETCH_YARN = Figure(2.8, "... with YaRN (nats)")
UNIGRAM_PG19 = Figure(6.45, "PG-19 under Qwen3's tokenizer: unigram entropy, the loss of predicting by frequency (nats)")
ONSET_PLAIN = Figure(
    70000,
    "Qwen3-4B without rescaling: where its per-token loss starts to climb, read off the guide's figure (tokens; 40,960 trained)",
)
FIRST_LOSS_1M = Figure(4.311, "Qwen3-8B, 1,048,576 tokens with YaRN: first logged training loss (nats)")
# The fine-tuning memory primer's budget of a 7B model before activations (GB): what lesson 00 computes
PRIMER_7B = {
    "full": Figure(84, "7B, full fine-tuning in bf16 with AdamW: weights, gradients, optimizer (GB)", 0.01, "arithmetic"),
    "LoRA": Figure(14, "7B with LoRA: bf16 weights, adapters' gradients and state (GB)", 0.05, "the primer rounds it"),
    "QLoRA": Figure(4, "7B with QLoRA: 4-bit weights, adapters' gradients and state (GB)", 0.05, "the primer rounds it"),
}
# The versions the guide names for each lever: (package, minimum)
REQUIREMENTS = {
    "offload": (("transformers", "5.17.0"),),  # offload inside activation checkpointing arrived in 5.17
    "context parallelism": (("accelerate", "1.11.0"),),
    "sequence parallelism": (("accelerate", "1.12.0"), ("deepspeed", "0.18.1")),
}


def requirements(lever: str) -> list[str]:
    """One line per package the guide requires for `lever`: the minimum and what is installed here."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    lines = []
    for package, minimum in REQUIREMENTS[lever]:
        try:
            installed = version(package)
            verdict = f"installed {installed}, " + ("meets it" if Version(installed) >= Version(minimum) else "TOO OLD")
        except PackageNotFoundError:
            verdict = "not installed here"
        lines.append(f"{lever}: {package} >= {minimum} (guide); {verdict}")
    return lines


def beside(figure: Figure, ours, *, ratio: bool = True) -> str:
    """One line for a lesson's recap: the guide's figure and this run's number (None: not computed here),
    ours shown to the guide's own precision."""
    places = len(repr(figure.value).partition(".")[2]) if isinstance(figure.value, float) else 0
    guide = f"{figure.what.replace('(GB)', '(its GB read as GiB)')}: {figure.source} {figure.value:,.{places}f}"
    if ours is None:
        return f"{guide}; not computed at this size"
    return f"{guide}, ours {ours:,.{places}f}" + (f" ({ours / figure.value:.2f}×)" if ratio else "")


# lesson 02: TRL's example sft_qwen3_8b_1m_context, its YaRN override (model_init_kwargs["rope_parameters"]; Qwen3's
# 32,768 trained positions) and its comment on where the loss starts without it
EXAMPLE_ROPE_PARAMETERS = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 32.0, "original_max_position_embeddings": 32768}
FIRST_LOSS_1M_PLAIN = Figure(10.6, "Qwen3-8B, 1,048,576 tokens without RoPE scaling: first loss (nats)", source="TRL's example")

# lessons 04 and 06: the million-token run's time (the guide's progress bar: step 1/12 at 380.10 s/it)
STEP_SECONDS_1M = Figure(380, "Qwen3-8B, 1,048,576 tokens, CP over 8 H100s: seconds per step")
STEPS_1M = Figure(12, "the example's optimizer steps, one million-token sequence each")
# YaRN (Peng et al. 2023, arXiv:2309.00071, section 4): Llama 2 extended 16x, fine-tuned on PG19 cut into 64k-token pieces
YARN_STEPS = Figure(400, "YaRN's s=16 Llama 2 fine-tune: optimizer steps", source="YaRN")
YARN_STEP_TOKENS = Figure(64 * 65536, "... tokens per step: a global batch of 64 sequences of 64k", source="YaRN")

# lesson 01/03: the length of the guide's Qwen3-4B profiles, which turns its 96k peaks into a slope per token
PROFILE_TOKENS = Figure(98304, "the length of the guide's Qwen3-4B memory profiles (tokens)")
