import json

import pytest
from conftest import small_config
from transformers import BertConfig

from longctx import LongctxError, models
from longctx.compat import fused_head_tiles
from longctx.lengths import MAX_TOKENS
from longctx.memory import plan
from longctx.memory.estimate import estimate
from longctx.tools.cli import main


@pytest.mark.exhaustive
def test_plan_json_for_a_config_file_of_another_family(tmp_path, capsys):
    assert (
        main(
            [
                "plan",
                "--model",
                small_config(tmp_path, vocab_size=1024),
                "--seq-len",
                "8k",
                "--gpus",
                "2",
                "--gpu-memory",
                "0.05",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    last = ["plain loss", "chunked loss", "checkpointing", "offload", "context parallel ×2"]  # each step's new lever
    assert [s["levers"][-1] for s in out["steps"]] == last
    peaks = [s["per_gpu_peak_gib"] for s in out["steps"]]
    assert peaks[-1] < peaks[3] < peaks[2]  # each of the last levers lowers the peak
    assert all(s["fits"] == (s["per_gpu_peak_gib"] <= 0.05) for s in out["steps"])
    assert out["cheapest"] == next((s for s in out["steps"] if s["fits"]), None)


def _bert(tmp_path):  # an encoder
    (tmp_path / "config.json").write_text(json.dumps(BertConfig().to_dict()))
    return str(tmp_path / "config.json")


@pytest.mark.parametrize(
    "model,kwargs,named",  # refused before any worker starts, naming the parameter or flag to change
    [
        ("qwen3-8b", dict(seq_len=1048576, gpus=6, gpu_memory_gib=80), "--gpus"),  # not a power of two
        ("qwen3-8b", dict(seq_len=1000001, gpus=8, gpu_memory_gib=80), "pad_to_multiple_of"),
        ("qwen3-8b", dict(seq_len=1048576, gpus=8, gpu_memory_gib=0), "GPU memory"),
        ("qwen3-8b", dict(seq_len=1048576, gpus=1024, gpu_memory_gib=80), "--gpus"),  # more ranks than modelled
        ("qwen3-8b", dict(seq_len=1048576, gpus=1, gpu_memory_gib=80, mixed_precision=True), "--gpus"),  # no CP step
        ("qwen3-8b", dict(seq_len=1048576, gpus=10**20, gpu_memory_gib=80), "--gpus"),
        ("qwen3-4b", dict(seq_len=10**9, gpus=1, gpu_memory_gib=80), f"{MAX_TOKENS:,}"),
        (
            lambda folder: small_config(folder, "Mistral", sliding_window=4096),
            dict(seq_len=1048576, gpus=8, gpu_memory_gib=80),
            "sliding_attention",
        ),
        (_bert, dict(seq_len=4096, gpus=1, gpu_memory_gib=80), "model_type"),
    ],
)
def test_plan_refusals(tmp_path, model, kwargs, named):
    with pytest.raises(LongctxError) as err:
        plan.plan(model(tmp_path) if callable(model) else model, **kwargs)
    assert named in str(err.value)


def test_cp_halves_the_per_rank_activations():
    with fused_head_tiles(256, 1024):  # small loss tiles, so the per-token activations dominate
        one, two = (estimate("small", 16384, cp_size=n, checkpointing=False) for n in (1, 2))
    assert two.max_by_category()["activations"] < 0.55 * one.max_by_category()["activations"]
    assert two.max_by_category()["optimizer"] == pytest.approx(one.max_by_category()["optimizer"] / 2, rel=0.01)


def test_the_plan_table_is_one_text_for_the_cli_and_the_lesson():
    timed = {"gpus": 1, "step_seconds": 40.0, "tokens_per_second": 6553.6}
    steps = [
        {"levers": ["chunked loss"], "per_gpu_peak_gib": 120.0, "fits": False, **timed},
        {"levers": ["chunked loss", "checkpointing"], "per_gpu_peak_gib": 70.0, "fits": True, **timed},
        {"levers": ["chunked loss", "checkpointing", "context parallel ×2"], "per_gpu_peak_gib": 60.5, "fits": True,
         **dict(timed, gpus=2, step_seconds=21.0)},
    ]  # fmt: skip
    result = {"model": "qwen3-4b", "seq_len": 262144, "gpus": 2, "gpu_memory_gib": 80.0, "steps": steps, "cheapest": steps[1],
              "fastest": steps[2], "time_card": "H200"}  # fmt: skip
    lines = plan.table(result).splitlines()
    assert lines[0] == "qwen3-4b at 262,144 tokens, up to 2 GPU(s) of 80 GiB (times on H200):"
    assert "over" in lines[1] and "fits" in lines[2] and "40.0 s/step" in lines[1]
    assert lines[4] == "cheapest that fits: chunked loss + checkpointing (70.0 GiB per GPU)"
    assert lines[5].startswith("fastest that fits: chunked loss + checkpointing + context parallel ×2 (21.0 s per step on 2")
    assert lines[6].endswith("+CP×2 21.0 s (42); +ckpt 40.0 s (40)")  # the faster set costs more GPU-seconds
    nothing = dict(result, cheapest=None, fastest=None)
    assert plan.table(nothing).endswith("nothing fits on 2 GPU(s) of 80 GiB: more GPUs or memory")


def test_plan_json_takes_the_attention_of_its_one_gpu_steps_and_says_its_card(capsys):
    """One plan through the CLI: progress on stderr, only JSON on stdout; eager on the one-GPU steps, then SDPA in a step
    of its own (eager keeps every seq × seq score matrix) and under CP; the card and what is not counted in its table."""
    args = ["plan", "--model", "tiny", "--seq-len", "4k", "--gpus", "2", "--gpu", "A100-40GB", "--attn", "eager", "--json"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert "plan: estimates" in err and result["gpus"] == 2 and result["attn_implementation"] == "eager"
    kernels = [step["attention"].split(" ")[0] for step in result["steps"]]
    assert kernels == ["eager"] * 4 + ["FlashAttention-2"] * 2
    assert result["steps"][3]["per_gpu_peak_gib"] > result["steps"][4]["per_gpu_peak_gib"]  # SDPA's step: no scores kept
    assert "A100-40GB: 40.00 GiB reported by the driver" in plan.table(result) and "NCCL" in plan.table(result)


@pytest.mark.exhaustive
def test_plan_puts_the_tiled_mlp_after_offload_and_under_every_cp_step():
    from longctx.memory.plan import plan

    result = plan("deep", 8192, gpus=2, gpu_memory_gib=24, tiled_mlp=True, progress=False)
    levers = [step["levers"] for step in result["steps"]]
    assert levers[4] == ["chunked loss", "checkpointing", "offload", "tiled MLP"]
    assert levers[5] == levers[4] + ["context parallel ×2"] and result["tiled_mlp"]
    offload, tiled = (result["steps"][i]["per_gpu_peak_gib"] for i in (3, 4))
    assert tiled <= offload  # the tiled MLP never adds to the peak


def test_another_attention_is_left_for_sdpa_in_a_step_of_its_own_before_the_cp_steps():
    """torch's CP runs SDPA only: the plan says so in its own step, so what leaving eager saves is not credited to CP."""
    steps = plan.ladder(4, attn_implementation="eager")
    assert [kw["attn_implementation"] for _, kw in steps] == ["eager"] * 4 + ["sdpa"] * 3
    assert steps[4][0] == steps[3][0] + ["SDPA attention"] and steps[5][0] == steps[4][0] + ["context parallel ×2"]
    others = [[lever for lever in levers if lever != "SDPA attention"] for levers, _ in steps if levers[-1] != "SDPA attention"]
    assert others == [levers for levers, _ in plan.ladder(4)]  # otherwise the same steps as with SDPA throughout
    assert plan.check(models.config("tiny"), 4096, 4, 80, attn="flash_attention_2") == 80  # a GPU's kernel: not refused


@pytest.mark.exhaustive
def test_plan_prices_every_step_on_the_named_card_and_names_the_fastest_that_fits():
    from longctx.memory.plan import plan

    result = plan("tiny", 4096, gpus=2, gpu_memory_gib="H200", progress=False)
    assert result["time_card"] == "H200" and all(r["step_seconds"] > 0 for r in result["steps"])
    fitting = [r for r in result["steps"] if r["fits"]]
    assert result["cheapest"] == fitting[0] and result["fastest"] == min(fitting, key=lambda r: r["step_seconds"])
    assert plan("tiny", 4096, gpus=1, gpu_memory_gib=24, progress=False)["time_card"] == "H100-80GB"  # GiB: the default card


@pytest.mark.exhaustive
def test_the_host_state_steps_come_before_cp_which_builds_on_the_step_before_them():
    """ALST's one-GPU levers are steps of their own on one GPU; the CP steps shard the state with FSDP2 instead, so they
    build on the step before the first host one."""
    # a model whose state outweighs DeepSpeed's reduce bucket (0.93 GiB, kept on the device)
    result = plan.plan("qwen3-0.6b", 4096, gpus=2, gpu_memory_gib=24, tiled_mlp=True, host_state=True, progress=False)
    levers = [step["levers"] for step in result["steps"]]
    assert levers[5:8] == [levers[4] + ["optimizer on host"], levers[4] + ["optimizer on host", "weights on host"],
                           levers[4] + ["optimizer on host", "weights on host", "fused norm"]]  # fmt: skip
    assert levers[8] == levers[4] + ["context parallel ×2"]
    peaks = [step["per_gpu_peak_gib"] for step in result["steps"]]
    assert peaks[5] < peaks[4] and peaks[6] < peaks[5]  # the state leaves the device
    assert "CPU Adam" in plan.table(result)
