import pytest
from conftest import refused

from longctx import guide
from longctx.memory import budget


def test_seven_b_primer_figures():
    # The lesson: 7e9 weights, 40e6 LoRA weights; 12 bytes per trained weight (bf16 w + bf16 g + 2 fp32 moments).
    full = budget.training_budget(7e9, "full").total
    lora = budget.training_budget(7e9, "lora", trainable_params=40e6).total
    qlora = budget.training_budget(7e9, "qlora", weight_dtype="nf4", trainable_params=40e6).total
    assert full == 7e9 * (2 + 2 + 8)
    assert lora == 7e9 * 2 + 40e6 * (2 + 2 + 8)
    assert qlora == 7e9 * 0.5 + 40e6 * (2 + 2 + 8)
    for name, gb in (("full", full), ("LoRA", lora), ("QLoRA", qlora)):
        assert gb / 1e9 == pytest.approx(guide.PRIMER_7B[name].value, rel=guide.PRIMER_7B[name].rel), name


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        (dict(method="dora"), "method"),
        (dict(method="lora"), "trainable_params"),
        (dict(method="qlora", trainable_params=1), "weight_dtype"),
        (dict(weight_dtype="fp8"), "weight_dtype"),
    ],
)
def test_bad_budget_arguments(kwargs, fragment):
    with refused(fragment):
        budget.training_budget(1e6, **kwargs)
