"""The time model's two efficiencies (longctx/memory/timing.py, EFFICIENCY), fitted to two measured steps, and every
other measured step the suite knows set beside its prediction. Two steps fix the two constants: the guide's
million-token step (attention is 96% of its FLOPs) and the H200's Qwen3-0.6B step (the best-measured step with a
large share of linear FLOPs). The other four are held out: predicted, then compared.

    .venv/bin/python scripts/fit_step_time.py            # prints the constants and the table (about a minute)
    .venv/bin/python scripts/fit_step_time.py --write    # also writes benchmarks/results/step_times.json

tests/test_timing.py holds EFFICIENCY to this fit and the held-out steps to the committed table."""

import argparse
import json
from pathlib import Path

import numpy as np

from longctx import guide
from longctx.memory import cards, timing
from longctx.memory.costs import COL
from longctx.memory.estimate import estimate

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "benchmarks" / "results" / "gpu_check-h200-2026-12-04" / "2-tracker-fixed" / "03_activation_offload.results.json"
OUT = REPO / "benchmarks" / "results" / "step_times.json"


def _h200(key: str) -> float:
    return json.loads(H200.read_text())["results"][key]  # the committed report's measured seconds


def _cp(n: int) -> dict:
    return {"cp_size": n, "offload": True} if n > 1 else {"offload": True}


# (label, model, tokens, estimate's levers, card, measured seconds, source, fitted: which constant it fixes or None)
STEPS = [
    ("guide: Qwen3-8B, 1,049,000 tokens, CP×8, offload", "qwen3-8b", 1049008, _cp(8), "H100-80GB",
     guide.STEP_SECONDS_1M.value, "the guide's progress bar, 380.10 s/it", "attention"),
    ("H200: Qwen3-0.6B, 32,768 tokens", "qwen3-0.6b", 32768, {}, "H200",
     _h200("seconds_per_step_no_offload"), "longctx's H200 check, notebook 03 (steps 2-4)", "linear"),
    *[(f"guide: Qwen3-8B, 131,072 tokens, CP×{n}, offload", "qwen3-8b", 131072, _cp(n), "H100-80GB",
       guide.CP_STEP_SECONDS_131K[n].value, "the guide's section on context parallelism", None) for n in (2, 4, 8)],
    ("H200: Qwen3-0.6B, 32,768 tokens, offload", "qwen3-0.6b", 32768, {"offload": True}, "H200",
     _h200("seconds_per_step_offload"), "longctx's H200 check, notebook 03 (steps 2-4)", None),
]  # fmt: skip


def profiles() -> list:
    return [estimate(model, n, **levers) for _, model, n, levers, *_ in STEPS]


def fit(profs: list) -> timing.Efficiency:
    """Solve the two fitted steps' times for (1/linear, 1/attention): the FLOP terms are linear in them; what depends
    on them otherwise (a wait that overlapping compute would hide) is settled by iterating."""
    fitted = [(p, s) for p, s in zip(profs, STEPS) if s[-1]]
    eff = timing.Efficiency(0.5, 0.5, "")
    for _ in range(50):
        rows, rhs = [], []
        for p, (_, _, _, _, gpu, seconds, *_) in fitted:
            peak = cards.CARDS[gpu].bf16_tflops * 1e12
            lin, att = (float(p.costs[:, COL[k]].sum()) / peak for k in ("linear_flops", "attention_flops"))
            rest = timing.step_time(p, gpu, eff)["seconds"] - lin / eff.linear - att / eff.attention
            rows.append([lin, att])
            rhs.append(seconds - rest)
        inv_linear, inv_attention = np.linalg.solve(np.array(rows), np.array(rhs))
        new = timing.Efficiency(1 / inv_linear, 1 / inv_attention, timing.EFFICIENCY["hopper"].fitted_to)
        if abs(new.linear - eff.linear) < 1e-9 and abs(new.attention - eff.attention) < 1e-9:
            return new
        eff = new
    raise RuntimeError("the fit did not settle")


def table(profs: list, eff: timing.Efficiency) -> list[dict]:
    rows = []
    for p, (label, model, n, levers, gpu, seconds, source, fitted) in zip(profs, STEPS):
        t = timing.step_time(p, gpu, eff)
        rows.append({
            "step": label, "card": gpu, "measured_seconds": seconds, "predicted_seconds": round(t["seconds"], 3),
            "ratio": round(t["seconds"] / seconds, 3), "fitted": fitted or "held out", "source": source,
            "attention_share": round(t["breakdown_seconds"]["attention"] / t["seconds"], 3),
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(REPO)}")
    args = parser.parse_args()
    profs = profiles()
    eff = fit(profs)
    print(f"EFFICIENCY['hopper']: linear={eff.linear:.4f}, attention={eff.attention:.4f}")
    rows = table(profs, eff)
    for r in rows:
        print(f"  {r['step']:55s} {r['card']:10s} measured {r['measured_seconds']:8.2f} s  predicted "
              f"{r['predicted_seconds']:8.2f} s  ({r['ratio']:.2f}×, {r['fitted']})")  # fmt: skip
    if args.write:
        OUT.write_text(json.dumps({"efficiency": {"linear": round(eff.linear, 4), "attention": round(eff.attention, 4)},
                                   "steps": rows}, indent=2) + "\n")  # fmt: skip
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
