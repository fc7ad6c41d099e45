"""The time model (longctx/memory/costs.py, kernels.py, timing.py): FLOPs counted from the traced step as the hand
count has them, the fast estimate's costs equal to every layer traced, the overlap rules on a hand-made trace, each
attention kernel at its own published rate, the host's share, the fitted constants equal to their fit, and the
held-out measured steps within 15% of the prediction (the committed table, benchmarks/results/step_times.json)."""

import importlib.util
import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import refused

from longctx import models
from longctx.memory import cards, costs, timing
from longctx.memory.estimate import estimate
from longctx.paths import REPO
from longctx.tools.cli import main


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sums(profile) -> dict:
    c, phases = profile.costs, np.asarray(profile.phases)
    again = c[:, costs.COL["recompute"]] == 1
    kinds = {"linear": c[:, costs.COL["linear_flops"]], "attention": c[:, costs.COL["attention_flops"]]}
    kinds["attention"] = kinds["attention"] + c[:, costs.COL["attention_backward_flops"]]
    return {
        (kind, part): int(kinds[kind][rows].sum())
        for kind in kinds
        for part, rows in (("forward", phases == "forward"), ("backward", (phases == "backward") & ~again), ("again", again))
    }


def test_flops_are_the_hand_count_of_the_step():
    """Qwen3-0.6B at 16,384 tokens, the GPU's step: every product the step runs, TRL's head tiles (cut to three on fake
    tensors, the second counting for the rest) and the FlashAttention stand-in's charges included."""
    tokens, cfg = 16384, models.config("qwen3-0.6b")
    got = _sums(estimate("qwen3-0.6b", tokens))
    h, inter, vocab, layers = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    layer = 2 * h * q + 2 * h * kv + 3 * h * inter  # q, o; k, v; gate, up, down
    body, head = 2 * tokens * layers * layer, 2 * (tokens - 1) * h * vocab  # the last token has no label to score
    attention = layers * 2 * tokens * tokens * q  # QKᵀ and PV, 2·s²·d each per head, half of it under the causal mask
    assert got["linear", "forward"] == body + head
    assert got["linear", "backward"] == 2 * body + 3 * head  # TRL's head backward: the logits again, then both gradients
    # recomputation stops once the saved tensors backward needs exist (torch's non-reentrant checkpoint): the last
    # product of each layer, down_proj, is not run again
    assert got["linear", "again"] == body - 2 * tokens * layers * h * inter
    assert got["attention", "forward"] == got["attention", "again"] == attention
    assert got["attention", "backward"] == attention * 5 // 2  # five products, the scores recomputed (torch's count)


def _stub(rows: list[dict], phases: list[str], **meta):
    table = np.zeros((len(rows), len(costs.COLUMNS)), dtype=np.int64)
    for i, row in enumerate(rows):
        for key, value in row.items():
            table[i, costs.COL[key]] = value
    meta = {"device": "cuda", "seq_len": 1000, "batch": 1, "cp_size": 2, **meta}
    return SimpleNamespace(costs=table, phases=phases, meta=meta)


def test_what_overlaps_and_what_waits():
    """On H100 numbers with efficiency 1: 1 s of products is 989.4e12 FLOPs, 1 s of the link 450e9 bytes."""
    card, second = cards.CARDS["H100-80GB"], 989.4e12
    link, host = card.gpu_gb_s * 1e9, card.host_gb_s * 1e9
    one = timing.Efficiency(1.0, 0.0, "test")
    rows = [
        {"comm": costs.CP_GATHER, "comm_bytes": 3 * link},  # issued: 3 s on the link
        {"comm": costs.WAIT},  # waited at once under fake tensors; the eager ring waits after the next kernel ...
        {"attention_flops": second, "kernel": costs.EAGER},  # ... 1 s of attention (eager: the linear rate), beside
        # the exchange: 2 s left to wait
        {"linear_flops": 2 * second},
        {"host_bytes": host},  # offload's copy: on the stream, 1 s
        {"comm": costs.FSDP_GATHER, "comm_bytes": link / 2},  # the pass's first gather: 0.5 s, nothing to hide it
        {"linear_flops": second},  # backward: 1 s of products ...
        {"comm": costs.FSDP_REDUCE, "comm_bytes": 10 * link},  # ... beside 10 s of reduce-scatter: 9 s left over
    ]
    t = timing.step_time(_stub(rows, ["forward"] * 6 + ["backward"] * 2), "H100-80GB", one)
    parts, exposed = t["breakdown_seconds"], t["bytes"]["communication_exposed_seconds"]
    assert parts["attention"] == pytest.approx(1) and parts["linear"] == pytest.approx(3) and parts["copies"] == pytest.approx(1)
    assert exposed["context parallel"] == pytest.approx(2) and exposed["fsdp"] == pytest.approx(0.5 + 9)
    assert t["seconds"] == pytest.approx(sum(parts.values())) == pytest.approx(1 + 3 + 1 + 2 + 9.5)


def test_step_time_refuses_what_it_cannot_price():
    with refused("'80'"):  # not a card: the value named
        timing.step_time(estimate("tiny", 256), "80")
    with refused("device"):
        timing.step_time(estimate("tiny", 256, device="cpu", dtype="fp32"))
    assumed = timing.step_time(estimate("tiny", 256), "A100-80GB")
    assert not assumed["efficiency"]["fitted"] and "assumed from Hopper" in timing.describe(assumed)


def test_the_cli_prints_the_time_and_its_parts(capsys):
    assert main(["estimate", "--model", "qwen3-0.6b", "--seq-len", "8k", "--gpu", "H200", "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["time"]
    assert t["gpu"] == "H200" and t["seconds"] == pytest.approx(sum(t["breakdown_seconds"].values()))
    assert t["tokens_per_second"] == pytest.approx(8192 / t["seconds"]) and 0 < t["mfu"] < t["hfu"] < 1
    assert main(["estimate", "--model", "tiny", "--seq-len", "256", "--device", "cpu", "--dtype", "fp32"]) == 0
    assert "time: not priced for the CPU's step" in capsys.readouterr().out
    assert main(["estimate", "--model", "tiny", "--seq-len", "256", "--cp-comm", "alltoall"]) == 2
    assert "needs cp_size > 1" in capsys.readouterr().err


def test_each_attention_kernel_is_priced_at_its_own_published_rate():
    """FlashAttention-2 and SDPA (cuDNN first on Hopper) give different times for the same step, each naming its rate
    and source; with SDPA's flash backend named, SDPA costs what FlashAttention-2 does."""
    sdpa, fa2 = (estimate("qwen3-0.6b", 16384, attn_implementation=a) for a in ("sdpa", "flash_attention_2"))
    by_sdpa, by_fa2 = timing.step_time(sdpa, "H100-80GB"), timing.step_time(fa2, "H100-80GB")
    assert list(by_sdpa["attention_kernels"]) == ["cuDNN attention"] and list(by_fa2["attention_kernels"]) == ["FlashAttention-2"]
    assert by_fa2["breakdown_seconds"]["attention"] > 1.4 * by_sdpa["breakdown_seconds"]["attention"]
    for t in (by_sdpa, by_fa2):
        (rate,) = t["attention_kernels"].values()
        assert "arXiv:2407.08608" in rate["source"] and timing.kernel_names(t) in timing.describe(t)
    flash = timing.step_time(sdpa, "H100-80GB", sdpa="flash")
    assert flash["breakdown_seconds"]["attention"] == pytest.approx(by_fa2["breakdown_seconds"]["attention"], rel=1e-6)
    # the same kernel on an A100: the FlashAttention-2 paper's A100 rate
    assert "arXiv:2307.08691" in timing.step_time(fa2, "A100-80GB")["attention_kernels"]["FlashAttention-2"]["source"]


def test_the_host_step_the_all_to_alls_and_the_fabric_between_nodes():
    card = cards.CARDS["H100-80GB"]
    one = timing.Efficiency(1.0, 0.0, "test")
    params = 8e9
    # an optimizer on the host: every rank of the node at once at CPU Adam's rate, then this rank's weights back
    host = timing.step_time(_stub([{}], ["optimizer"], cp_size=1, offload_optimizer=True, params=params), card.name, one)
    assert host["breakdown_seconds"]["host"] == pytest.approx(params / timing.HOST_ADAM + params * 2 / (card.host_gb_s * 1e9))
    # Ulysses' all-to-all is waited for in full; past a node, every collective runs at the fabric's speed
    a2a = [{"comm": costs.ALL_TO_ALL, "comm_bytes": card.gpu_gb_s * 1e9}]
    inside = timing.step_time(_stub(a2a, ["forward"], cp_size=1, sp_size=8), card.name, one)
    across = timing.step_time(_stub(a2a, ["forward"], cp_size=1, sp_size=16), card.name, one)
    assert inside["breakdown_seconds"]["communication"] == pytest.approx(1.0)
    assert across["breakdown_seconds"]["communication"] == pytest.approx(card.gpu_gb_s / card.fabric_gb_s)
    # data-parallel replicas all-reduce the rank's bf16 gradients beside backward: 3 s of it over 1 s of products
    second, link = 989.4e12, card.gpu_gb_s * 1e9
    grads = _stub([{"linear_flops": second}], ["backward"], cp_size=1, params=3 * link / 2)  # 2 bytes a parameter
    pair = timing.step_time(grads, card.name, one, replicas=2)  # a ring of 2 sends the whole once: 3 s, 2 s left
    assert pair["breakdown_seconds"]["communication"] == pytest.approx(2.0)
    assert pair["tokens_per_second"] == pytest.approx(2 * 1000 / pair["seconds"])
    many = timing.step_time(grads, card.name, one, replicas=16)  # 2 x 15/16 of it, over the fabric between nodes
    assert many["breakdown_seconds"]["communication"] == pytest.approx(2 * 15 / 16 * 3 * card.gpu_gb_s / card.fabric_gb_s - 1)
    assert timing.step_time(grads, card.name, one)["breakdown_seconds"]["communication"] == 0
    # a real Ulysses estimate charges its all-to-alls
    sp = estimate("qwen3-0.6b", 16384, sp_size=2)
    assert timing.step_time(sp)["bytes"]["communication"]["ulysses all-to-all"] > 0


@pytest.fixture(scope="module")
def fitted():
    script = _script("step_times")
    profiles = script.profiles()
    return script, profiles, script.fit(profiles)


@pytest.mark.slow
def test_the_fitted_constants_are_their_fit(fitted):
    _, _, eff = fitted
    assert timing.EFFICIENCY["hopper"].linear == pytest.approx(eff.linear, abs=1e-4)
    assert timing.EFFICIENCY["hopper"].fixed == pytest.approx(eff.fixed, abs=1e-3)


@pytest.mark.slow
def test_held_out_steps_are_predicted_within_15_percent_as_committed(fitted):
    """Every published step the model expresses, as committed: the guide's three held out, ALST's long steps at
    FlashAttention-2's rate; a step the model misses says why in the table."""
    script, profiles, eff = fitted
    rows = script.table(profiles, timing.EFFICIENCY["hopper"])
    committed = json.loads(script.OUT.read_text())["steps"]
    assert rows == committed
    held_out = [r for r in rows if r["fitted"] == "held out"]
    assert sum(r["step"].startswith("guide") for r in held_out) >= 3 and sum(r["step"].startswith("ALST") for r in held_out) >= 3
    for row in held_out:
        assert ("known_miss" in row) is not (0.85 <= row["ratio"] <= 1.15), row


@pytest.mark.slow
def test_the_readme_states_each_levers_time_cost_as_the_time_model_gives_it():
    table = {line.split(" | ")[0].strip("| "): line.split(" | ")[2] for line in (REPO / "README.md").read_text().splitlines()
             if line.startswith("| ") and line.count(" | ") == 3}  # fmt: skip
    for lever, cost in _script("lever_costs").costs().items():
        assert table[lever] == cost, lever
