"""A lesson's "In your own script" is literal code; `recipe.written` reads it, `recipe.ran` records the config a lesson
built, and `recipe.drift` says where the two part (tests/test_notebooks.py applies it to every executed lesson). The
helpers' own configs build with the installed libraries."""

import inspect
import json

import torch
from accelerate import ParallelismConfig
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer

from longctx import data, models, recipe, train
from longctx.levers import rope, tiled_mlp
from longctx.run.cp_worker import sft_kwargs

CPU = train.on_this_machine("cpu")


def test_written_reads_the_calls_of_a_recipe_block_as_literals():
    markdown = """
Some prose, then the block a reader copies:

```python
from accelerate import ParallelismConfig
from trl import SFTConfig

args = SFTConfig(
    output_dir="run",
    max_length=1048576,
    parallelism_config=ParallelismConfig(cp_size=8, cp_backend="torch"),
    fsdp_config={"version": 2},
    learning_rate=2 * 1e-5,
)
trainer = SFTTrainer(model="Qwen/Qwen3-8B", args=args)
```
"""
    written = recipe.written(markdown)
    assert written["SFTConfig"]["parallelism_config"] == {"ParallelismConfig": {"cp_size": 8, "cp_backend": "torch"}}
    assert written["SFTConfig"]["fsdp_config"] == {"version": 2}
    assert written["SFTConfig"]["learning_rate"] == "2 * 1e-05"  # not a literal: kept as its source
    assert written["SFTTrainer"]["model"] == "Qwen/Qwen3-8B"


def test_drift_names_what_a_recipe_says_otherwise_and_the_levers_it_leaves_out():
    built = SFTConfig(
        output_dir="o",
        max_length=4096,
        activation_checkpointing=True,
        activation_checkpointing_kwargs={"offload": True},
        parallelism_config=ParallelismConfig(cp_size=2),
        fsdp=True,
        fsdp_config={"version": 2, "reshard_after_forward": True},
        **CPU,
    )
    ran = recipe.ran(built)
    same = {
        "output_dir": "elsewhere",  # where and how long: not compared (recipe.SIZES)
        "max_length": 1048576,
        "activation_checkpointing": True,
        "activation_checkpointing_kwargs": {"offload": True},
        "parallelism_config": {"ParallelismConfig": {"cp_size": 8, "cp_backend": "torch"}},
        "fsdp": True,
        "fsdp_config": {"version": 2},  # a dict: the keys written (transformers adds its defaults)
    }
    assert recipe.drift(same, ran) == []
    other = same | {"fsdp_config": {"version": 1}, "parallelism_config": {"ParallelismConfig": {"cp_backend": "x"}}}
    other.pop("activation_checkpointing_kwargs")
    problems = recipe.drift(other, ran)
    assert "fsdp_config.version: written 1, ran 2" in problems
    assert "parallelism_config.cp_backend: written 'x', ran 'torch'" in problems
    assert "activation_checkpointing_kwargs: ran {'offload': True}, not written" in problems


def test_ran_records_json_a_set_sorted_and_a_nested_config_by_its_class():
    lora = recipe.ran(LoraConfig(r=16, lora_alpha=32, target_modules=["v_proj", "q_proj"]))
    assert lora["values"]["target_modules"] == ["q_proj", "v_proj"] and {"r", "lora_alpha"} <= set(lora["changed"])
    json.dumps(lora)


def test_the_helpers_own_configs_build_on_this_machine():
    """cp_worker's rank config (a launch without a lesson's `args`) builds with the installed trl, transformers and
    accelerate."""
    spec = {"out": "o", "seed": 0, "checkpointing": True, "seq_len": 8192, "device": "cpu", "mode": "cp"}
    built = SFTConfig(**sft_kwargs(spec, 4))
    assert built.parallelism_config.cp_size == 4 and built.fsdp


def test_model_init_kwargs_give_the_model_sfttrainer_loads_the_rescaled_rotary(tmp_path):
    """Lesson 02's recipe: the YaRN dict in SFTConfig.model_init_kwargs reaches the model SFTTrainer loads by name."""
    folder = tmp_path / "model"
    models.load("tiny").save_pretrained(folder)
    wanted = rope.with_yarn(models.config("tiny"), 128, 512)
    args = SFTConfig(output_dir=str(tmp_path / "run"), max_length=512, model_init_kwargs=rope.model_init_kwargs(wanted), **CPU)
    trainer = SFTTrainer(
        model=str(folder), args=args, train_dataset=data.long_sequences(64, 2), processing_class=data.tokenizer()
    )
    assert trainer.model.config.rope_parameters["rope_type"] == "yarn"
    assert trainer.model.config.rope_parameters["factor"] == 4.0
    assert trainer.model.config.max_position_embeddings == 512


def test_the_tiled_mlp_module_lesson_07_prints_runs_on_its_own():
    """07's recipe prints longctx/tiled_mlp.py whole for a reader to paste: it must need nothing of longctx."""

    namespace: dict = {}
    exec(compile(inspect.getsource(tiled_mlp), "<tiled_mlp>", "exec"), namespace)  # noqa: S102 - the printed source
    plain, tiled = (models.load("tiny", seed=0, dtype="fp32") for _ in range(2))
    assert namespace["tile_mlp"](tiled) == tiled.config.num_hidden_layers
    ids = torch.randint(0, plain.config.vocab_size, (1, 256))  # 4 shards of hidden 64
    torch.testing.assert_close(tiled(input_ids=ids).logits, plain(input_ids=ids).logits)


def test_written_takes_the_first_call_of_a_class():
    markdown = "```python\nargs = SFTConfig(learning_rate=1e-4)\n```\n```python\nother = SFTConfig(learning_rate=2e-4)\n```"
    assert recipe.written(markdown)["SFTConfig"] == {"learning_rate": 1e-4}
