"""Every "In your own script" block is held to the card it names: the step it trains, read off the block as the
installed libraries read it (recipe.steps: the model and the dtype it loads in, the length and batch, checkpointing
and offload, the tiled MLP, CP/SP and FSDP2's fp32 master weights, DeepSpeed's offloads, LoRA, the attention kernel),
estimated on fake tensors at full size and set against the card's capacity. A block meant not to fit says so
(`# does not fit: ...`) and is held to that."""

import json

import pytest
from test_lessons import NOTEBOOKS, recipe_section

from longctx import models, recipe
from longctx.memory import cards
from longctx.memory.estimate import estimate
from longctx.paths import REPO


def _steps(name):
    return recipe.steps(recipe_section(name), REPO)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_trainer_a_recipe_builds_names_its_card(name):
    assert _steps(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_recipe_fits_the_card_it_names(name, capsys):
    for step in _steps(name):
        profile = estimate(models.offline_config(step["model"]), step["seq_len"], **step["kwargs"])
        capacity = cards.capacity(step["card"])[0]
        with capsys.disabled():  # the closing note's table: `pytest -s tests/test_recipes.py`
            print(json.dumps({"lesson": name, "model": step["model"], "seq_len": step["seq_len"], "card": step["card"],
                              "gpus": step["gpus"], "peak_gib": round(profile.peak_gib, 2), **step["kwargs"]}))  # fmt: skip
        assert (profile.peak_gib <= capacity) is step["fits"], (name, step["line"], profile.peak_gib, capacity)
        ranks = step["kwargs"]["cp_size"] * step["kwargs"]["sp_size"]
        assert ranks == step["gpus"] or ranks == 1, (name, "a step over one GPU names each rank's card", step["gpus"])


def test_a_recipe_is_read_as_the_installed_libraries_read_it():
    """Two blocks a reader could copy, one wrong: no dtype (trl loads fp32) and offload left in a comment."""
    wrong = """```python
args = SFTConfig(output_dir="o", per_device_train_batch_size=1, max_length=98304)
    # activation_checkpointing_kwargs={"offload": True}
trainer = SFTTrainer(model="Qwen/Qwen3-4B", args=args)  # fits: 1 × H100-80GB
```"""
    [step] = recipe.steps(wrong, REPO)
    assert step["kwargs"]["dtype"] == "fp32" and not step["kwargs"]["offload"] and step["kwargs"]["checkpointing"]
    right = wrong.replace('max_length=98304)', 'max_length=98304, model_init_kwargs={"dtype": "bfloat16"},\n'
                          'activation_checkpointing_kwargs={"offload": True})')  # fmt: skip
    [step] = recipe.steps(right, REPO)
    assert step["kwargs"]["dtype"] == "bf16" and step["kwargs"]["offload"]
    fsdp = right.replace('output_dir="o",', 'output_dir="o", fsdp=True, parallelism_config=ParallelismConfig(cp_size=8),')
    kwargs = recipe.steps(fsdp, REPO)[0]["kwargs"]  # trl's bf16=True under FSDP2: accelerate's fp32 master weights
    assert (kwargs["mixed_precision"], kwargs["cp_size"], kwargs["dtype"]) == (True, 8, "bf16")
