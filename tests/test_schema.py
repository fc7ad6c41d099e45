"""Parameter values a lesson cannot use, refused before a kernel starts by each notebook's schema
(notebooks/params/<notebook>/schema.yaml, checked with jsonschema)."""

import json
import shutil

import pytest

from longctx import LongctxError, data, models
from longctx.run import harness, schema


def test_every_notebook_declares_its_parameters_once_and_its_sizes_follow_them():
    for name, path in harness.notebooks().items():
        declared = harness.declared_parameters(path)
        assert list(schema.schema(name)["properties"]) == list(declared), name  # the same names, in the same order
        for size in harness.sizes(path):
            params = {**declared, **harness.size_params(path, size)}
            schema.check(name, params, on_cpu=size != "gpu")  # every size file passes its own schema


def test_every_whole_number_parameter_has_an_upper_bound():
    loose = [
        f"{name}.{key}"
        for name in harness.notebooks()
        for key, prop in schema.schema(name)["properties"].items()
        if "integer" in (prop.get("type"), prop.get("items", {}).get("type"))
        and "maximum" not in prop
        and "maximum" not in prop.get("items", {})
    ]
    assert loose == []


def test_a_length_the_estimator_refuses_is_refused_before_a_kernel_starts():
    from longctx.lengths import MAX_TOKENS

    schema.check("06_one_million_tokens", {"SEQ_LEN": MAX_TOKENS, "GPUS": 8})
    with pytest.raises(LongctxError, match=f"must be at most {MAX_TOKENS:,}"):
        schema.check("06_one_million_tokens", {"SEQ_LEN": 2 * MAX_TOKENS, "GPUS": 8})
    with pytest.raises(LongctxError, match="has 1.5, which must be a whole number"):
        schema.check("01_chunked_loss", {"FULL_LENGTHS": [98304, 1.5]})


def test_a_config_the_estimator_refuses_is_refused_before_a_kernel_starts(tmp_path):
    settings = models.config("qwen3-4b").to_dict()
    models.config("qwen3-4b").save_pretrained(tmp_path)  # a whole config is taken: the same check passes it
    estimating = [n for n in harness.notebooks() if "FULL_MODEL" in schema.schema(n)["properties"]]
    for name in estimating:
        schema.check(name, {"FULL_MODEL": str(tmp_path / "config.json")})
    (tmp_path / "config.json").write_text(json.dumps({**settings, "vocab_size": 10**13}))  # a typo of a vocabulary
    for name in estimating:
        with pytest.raises(LongctxError, match=r"FULL_MODEL=.* is no model the estimate takes: The config's vocab_size"):
            schema.check(name, {"FULL_MODEL": str(tmp_path)})
    assert estimating


def test_the_gpu_counts_a_lesson_takes_are_the_ones_the_cp_check_takes():
    from longctx.shapes import check_plan

    check_plan(models.config("tiny"), 2**20, cp_size=64)
    with pytest.raises(LongctxError, match="at most 64 GPUs"):
        check_plan(models.config("tiny"), 2**20, cp_size=128)
    for notebook, name in (
        ("06_one_million_tokens", "GPUS"),
        ("06_one_million_tokens", "SECOND_GPUS"),
        ("04_context_parallelism", "RANKS"),
    ):
        prop = schema.schema(notebook)["properties"][name]
        assert prop.get("items", prop)["maximum"] == 64, (notebook, name)


@pytest.mark.parametrize("params", [{"SHARDS": 8}, {"SHARDS": "[8]"}, {"SEQ_LEN": "1M"}, {"SEQ_LEN": "long"}])
def test_a_wrong_type_is_refused_naming_the_parameter_and_how_to_give_it(params):
    with pytest.raises(LongctxError, match=next(iter(params))) as err:
        schema.check("07_tiled_mlp", params)
    assert ("-y" in str(err.value)) is ("SHARDS" in params)  # papermill's -p passes a list as text: its -y does not


def test_a_model_without_weights_is_refused_where_a_lesson_trains_it(tmp_path):
    models.config("tiny").save_pretrained(tmp_path)  # config.json only
    for value in (str(tmp_path), str(tmp_path / "config.json")):
        with pytest.raises(LongctxError, match="MODEL"):
            schema.check("03_activation_offload", {"MODEL": value})
    schema.check("03_activation_offload", {"MODEL": str(tmp_path)}, weights=False)  # a dry run: weights come later
    schema.check("06_one_million_tokens", {"MODEL": str(tmp_path / "config.json"), "GPUS": 8, "SEQ_LEN": 4096})
    schema.check("03_activation_offload", {"MODEL": str(data.data_dir() / "yarn-base")})  # a folder with weights
    schema.check("03_activation_offload", {"MODEL": "Qwen/Qwen3-0.6B"})  # a hub id: its weights come with it


# what transformers would load wrongly (its own loading report, `models.load`), refused before a kernel by name
DAMAGE = ["missing-tensor", "extra-tensor", "other-shape", "nan", "empty-tokenizer", "no-tokenizer", "more-ids",
          "huge-config"]  # fmt: skip


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_model_folder_transformers_would_load_wrongly_is_refused_before_a_kernel(tmp_path, damage):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(data.data_dir() / "yarn-base", folder)
    weights, file = load_file(folder / "model.safetensors"), folder / "model.safetensors"
    settings, layer = json.loads((folder / "config.json").read_text()), sorted(weights)[-1]
    if damage == "missing-tensor":  # transformers would start it from random numbers
        save_file({k: v for k, v in weights.items() if k != layer}, file)
    elif damage == "extra-tensor":  # a config cut to fewer layers than were saved: transformers drops the rest
        save_file({**weights, "model.layers.99.mlp.up_proj.weight": weights[layer].clone()}, file)
    elif damage == "other-shape":  # another model's tensor under the same name
        save_file({**weights, layer: torch.zeros(5, 7)}, file)
    elif damage == "nan":  # it would train on NaN
        save_file({**weights, layer: weights[layer] * float("nan")}, file)
    elif damage == "empty-tokenizer":
        (folder / "tokenizer.json").write_text("")
    elif damage == "no-tokenizer":
        for f in folder.glob("tokenizer*"):
            f.unlink()
    elif damage == "more-ids":  # a vocabulary smaller than the tokenizer's ids: the embedding indexed out of range
        (folder / "config.json").write_text(json.dumps({**settings, "vocab_size": 1000}))
        save_file({k: v[:1000] if v.shape[0] == settings["vocab_size"] else v for k, v in weights.items()}, file)
    else:  # refused before its model is built: the shapes alone took 90 s
        (folder / "config.json").write_text(json.dumps({**settings, "num_hidden_layers": 70000, "layer_types": None}))
    with pytest.raises(LongctxError, match="MODEL"):
        schema.check("03_activation_offload", {"MODEL": str(folder)})


def test_yarn_on_another_model_needs_its_trained_length():
    ours = {"MODEL": "base", "PROBE_MODEL": "retrieval"}  # the two miniatures know their trained lengths
    schema.check("02_yarn", ours | {"TRAINED_LENGTH": 0})
    schema.check("02_yarn", ours | {"MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 32768})
    with pytest.raises(LongctxError, match="TRAINED_LENGTH=0 must be set when MODEL is not 'base'"):
        schema.check("02_yarn", ours | {"MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 0})
    with pytest.raises(LongctxError, match="TRAINED_LENGTH=0 must be set when PROBE_MODEL is not 'retrieval'"):
        schema.check("02_yarn", ours | {"PROBE_MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 0})


def test_a_local_dataset_needs_the_splits_the_lesson_reads(tmp_path):
    source = data.data_dir() / "corpus-parquet"
    if not source.is_dir():
        pytest.skip("the parquet copy of the corpus is built by `longctx data`")
    assert data.check_dataset(str(source), splits=("train", "test")) == str(source)
    (tmp_path / "data").mkdir()
    shutil.copy(next(source.glob("data/train-*.parquet")), tmp_path / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(LongctxError, match="no 'test' split"):
        data.check_dataset(str(tmp_path), splits=("train", "test"))
    assert data.check_dataset(str(tmp_path)) == str(tmp_path)  # training text alone is enough elsewhere


@pytest.mark.parametrize("notebook", ["01_chunked_loss", "03_activation_offload", "06_one_million_tokens"])
def test_the_card_a_lesson_holds_its_estimates_against_is_a_known_card_or_gib(notebook):
    path = harness.resolve(notebook)
    for ok in ("A100-80GB", "h200", "79.5"):
        harness.check_parameters(path, {"GPU": ok}, "ci")
    for bad in ("H100", "-1", 79.5):
        with pytest.raises(LongctxError, match="GPU"):
            harness.check_parameters(path, {"GPU": bad}, "ci")


def test_the_padding_lessons_lengths_are_bounded_by_its_schema():  # data.varied_sequences trusts them
    for bad in ({"MIN_LEN": 200, "MAX_LENGTH": 100}, {"MIN_LEN": 100, "MAX_LENGTH": 100}, {"N_EXAMPLES": 0}):
        with pytest.raises(LongctxError, match=next(iter(bad))):  # (one length would be one shape)
            schema.check("05_trainium_padding", bad)
