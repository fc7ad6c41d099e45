"""The snippets the lessons print ("In your own script") build the very config the helpers build."""

import pytest

from longctx import LongctxError, data, models, recipe, train
from longctx.levers import compiling, padding, rope
from longctx.levers.cp_worker import sft_call as rank_call

CPU = {"use_cpu": True, "bf16": False}  # what a GPU recipe needs to be built on this machine


def _on_cpu(monkeypatch, call, names):
    """The helper's call reduced to `names`, and the snippet's `from trl import <Config>` made to give a
    class that builds on the CPU, both with the same CPU settings added."""
    import trl

    real = call.target
    shown = {n: call.kwargs[n] for n in names}
    if not real.__module__.startswith("trl."):  # peft's LoraConfig: nothing device-dependent
        return recipe.Call(real, shown)
    monkeypatch.setattr(trl, real.__name__, lambda **kw: real(**{**kw, **CPU}))
    return recipe.Call(real, {**shown, **CPU})


def _executed(text: str):
    namespace: dict = {}
    exec(compile(text, "<snippet>", "exec"), namespace)  # noqa: S102 - the lesson's own printed source
    return namespace["args"]


def _script():
    import importlib.util

    from longctx.paths import REPO

    spec = importlib.util.spec_from_file_location("sft_1m_context", REPO / "scripts" / "sft_1m_context.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_calls():
    from peft import LoraConfig

    spec = {"out": "out", "seed": 0, "checkpointing": True, "seq_len": 8192, "pad_to_multiple_of": 4, "device": "cuda"}
    yarn_cfg = rope.with_yarn(models.config("tiny"), 256, 1024)
    return {
        "accumulation": train.TrainConfig(
            output_dir="o", per_device_train_batch_size=2, gradient_accumulation_steps=16, for_device="cuda"
        ).sft_call(),
        "checkpointing": train.TrainConfig(output_dir="o", gradient_checkpointing=True, for_device="cuda").sft_call(),
        "chunked loss": train.TrainConfig(output_dir="o", for_device="cuda").sft_call(),
        "yarn": train.TrainConfig(
            output_dir="o", max_length=1024, for_device="cuda", extra={"model_init_kwargs": rope.model_init_kwargs(yarn_cfg)}
        ).sft_call(),
        "offload": train.TrainConfig(output_dir="o", gradient_checkpointing=True, offload=True, for_device="cuda").sft_call(),
        "context parallelism": rank_call({**spec, "mode": "cp"}, 4),
        "sequence parallelism": rank_call({**spec, "mode": "sp"}, 4),
        "padding": padding.padded_config(
            pad_to_multiple_of=64, steps=2, max_length=512, output_dir="o", for_device="cuda"
        ).sft_call(),
        "static cache": compiling.grpo_call(
            cache_implementation="static", steps=2, max_completion_length=16, output_dir="o", for_device="cuda"
        ),
        "lora": recipe.Call(LoraConfig, {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}),
        "one million tokens": _script().train_config(1048576, steps=1, out="o", processes=8, for_device="cuda").sft_call(),
    }


@pytest.mark.parametrize("lever", list(recipe.LEVERS))
def test_each_levers_printed_snippet_builds_the_helpers_config(monkeypatch, lever):
    call = _gpu_calls()[lever]
    text = recipe.snippet(call, lever)
    assert any(call.kwargs.get(n) is not None for n in recipe.LEVERS[lever])
    # the lever's arguments, and the batch size with every one (transformers' default of 8 is no long-context default)
    shown = [n for n in dict.fromkeys([*recipe.ALWAYS, *recipe.LEVERS[lever]]) if call.kwargs.get(n) is not None]
    assert all(f"{n}=" in text for n in shown)
    if lever == "sequence parallelism":
        pytest.importorskip("deepspeed")
    reference = _on_cpu(monkeypatch, call, shown).build()
    built = _executed(text)
    assert type(built) is type(reference)
    for name in shown:
        assert getattr(built, name) == getattr(reference, name), name


def test_the_gpu_recipes_ask_for_what_the_guide_asks():
    calls = _gpu_calls()
    assert calls["offload"].kwargs["activation_checkpointing_kwargs"] == {"offload": True}
    assert calls["context parallelism"].kwargs["parallelism_config"].kwargs["cp_size"] == 4
    assert calls["chunked loss"].kwargs["loss_type"] == "nll"  # trl 1.16's fused head
    assert calls["static cache"].kwargs["cache_implementation"] == "static"
    assert calls["accumulation"].kwargs["bf16"] is True  # what a GPU run trains in
    assert "loss_type" not in train.TrainConfig(output_dir="o", loss="plain").sft_call().kwargs
    million = calls["one million tokens"].kwargs  # TRL's example: offload, bf16, padding to 2 × 8 ranks
    assert million["activation_checkpointing_kwargs"] == {"offload": True} and million["bf16"] is True
    assert million["pad_to_multiple_of"] == 16 and million["max_length"] == 1048576


def test_the_yarn_snippet_gives_the_model_sfttrainer_loads_the_rescaled_rotary(tmp_path, monkeypatch):
    from trl import SFTTrainer

    folder = tmp_path / "model"
    models.load("tiny").save_pretrained(folder)
    wanted = rope.with_yarn(models.config("tiny"), 128, 512)
    call = train.TrainConfig(
        output_dir=str(tmp_path / "run"), max_length=512, extra={"model_init_kwargs": rope.model_init_kwargs(wanted)}
    ).sft_call()
    local = f"args = SFTConfig(output_dir={str(tmp_path / 'run')!r}, use_cpu=True, bf16=False, report_to='none', "
    args = _executed(recipe.snippet(call, "yarn").replace("args = SFTConfig(", local))
    trainer = SFTTrainer(
        model=str(folder), args=args, train_dataset=data.long_sequences(64, 2), processing_class=data.tokenizer()
    )
    assert trainer.model.config.rope_parameters["rope_type"] == "yarn"
    assert trainer.model.config.rope_parameters["factor"] == 4.0
    assert trainer.model.config.max_position_embeddings == 512


def test_the_chunked_snippet_selects_the_head_the_lessons_measure():
    import trl

    assert trl.SFTConfig(use_cpu=True, bf16=False, report_to="none").loss_type == "nll"  # the default, spelled out


def test_a_call_builds_nested_calls_and_refuses_what_it_cannot_print():
    from accelerate import ParallelismConfig

    call = recipe.Call(dict, {"p": recipe.Call(ParallelismConfig, {"cp_size": 2}), "n": [1, (2,)]})
    assert call.build()["p"].cp_size == 2
    assert call.source() == "dict(p=ParallelismConfig(cp_size=2), n=[1, (2,)])"
    with pytest.raises(LongctxError, match="cannot be printed"):
        recipe.Call(dict, {"x": object()}).source()
    with pytest.raises(LongctxError, match="Unknown lever"):
        recipe.snippet(call, "turbo")
    with pytest.raises(LongctxError, match="none of yarn"):
        recipe.snippet(train.TrainConfig(output_dir="o").sft_call(), "yarn")
    assert recipe.import_line(ParallelismConfig) == "from accelerate import ParallelismConfig"


def test_the_tiled_mlp_module_lesson_07_prints_runs_on_its_own():
    """07's recipe prints longctx/tiled_mlp.py whole for a reader to paste: it must need nothing of longctx."""
    import inspect

    import torch

    from longctx import tiled_mlp

    namespace: dict = {}
    exec(compile(inspect.getsource(tiled_mlp), "<tiled_mlp>", "exec"), namespace)  # noqa: S102 - the printed source
    plain, tiled = (models.load("tiny", seed=0, dtype="fp32") for _ in range(2))
    assert namespace["tile_mlp"](tiled) == tiled.config.num_hidden_layers
    ids = torch.randint(0, plain.config.vocab_size, (1, 256))  # 4 shards of hidden 64
    torch.testing.assert_close(tiled(input_ids=ids).logits, plain(input_ids=ids).logits)
