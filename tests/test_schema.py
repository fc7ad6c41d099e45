"""Parameter values a lesson cannot use, refused before a kernel starts by each notebook's schema
(notebooks/params/<notebook>/schema.yaml, checked with jsonschema)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from conftest import refused
from safetensors.torch import load_file, save_file

from longctx import LongctxError, data, models
from longctx.lengths import MAX_TOKENS
from longctx.memory.estimate import DEFAULT_DTYPE
from longctx.run import harness, needs, schema
from longctx.shapes import check_plan


def test_every_lesson_declares_its_parameters_once_and_each_size_follows_them_and_its_needs():
    """The schema names the parameters cell's names in its order; every size exists, passes the run's one check and
    declares its needs; ci.yaml is laid over gpu.yaml (a hub model swapped for a model folder in hub format with its
    own tokenizer, or a CPU preset) and needs no GPU; the gpu size loads bf16, the dtype every estimate assumes."""
    for name, nb in harness.notebooks().items():
        declared = harness.declared_parameters(nb)
        assert declared and list(schema.schema(name)["properties"]) == list(declared), name
        assert set(harness.sizes(nb)) == set(needs.SIZES), name
        for size in needs.SIZES:
            harness.check_parameters(nb, harness.size_params(nb, size), size)
            assert needs.of(name, size).minutes > 0
        gpu, ci = harness.size_params(nb, "gpu"), harness.size_params(nb, "ci")
        own = yaml.safe_load((nb.parent / "params" / name / "ci.yaml").read_text()) or {}
        assert {k: v for k, v in ci.items() if k not in own} == {k: v for k, v in gpu.items() if k not in own}, name
        if "MODEL" in own and not models.is_preset(ci["MODEL"]):
            assert Path(ci["MODEL"], "config.json").exists() and Path(ci["MODEL"], "tokenizer.json").exists()
        assert needs.of(name, "ci").accelerator == "none" and gpu.get("DTYPE", DEFAULT_DTYPE) == DEFAULT_DTYPE == "bf16"
    many = {name for name in harness.notebooks() if needs.of(name, "gpu").gpus > 1}
    assert many == {"04_context_parallelism", "06_one_million_tokens"}
    assert all(needs.of(name, "gpu").gpus == 1 for name in harness.notebooks() if name not in many)


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


OURS = {"MODEL": "base", "PROBE_MODEL": "retrieval"}  # 02's two miniatures, which know their trained lengths
# a value and what the refusal names: the parameter, and where papermill's -p cannot give a list, its -y
REFUSED = [
    ("06_one_million_tokens", {"SEQ_LEN": 2 * MAX_TOKENS, "GPUS": 8}, ["SEQ_LEN", f"{MAX_TOKENS:,}"]),  # the estimator's cap
    ("01_chunked_loss", {"FULL_LENGTHS": [98304, 1.5]}, ["FULL_LENGTHS", "1.5"]),
    ("07_tiled_mlp", {"SHARDS": 8}, ["SHARDS", "-y"]), ("07_tiled_mlp", {"SHARDS": "[8]"}, ["SHARDS", "-y"]),
    ("07_tiled_mlp", {"SEQ_LEN": "1M"}, ["SEQ_LEN", "1048576"]), ("07_tiled_mlp", {"SEQ_LEN": "long"}, ["SEQ_LEN"]),
    ("02_yarn", OURS | {"MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 0}, ["TRAINED_LENGTH", "MODEL"]),
    ("02_yarn", OURS | {"PROBE_MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 0}, ["TRAINED_LENGTH", "PROBE_MODEL"]),
    ("05_trainium_padding", {"MIN_LEN": 200, "MAX_LENGTH": 100}, ["MIN_LEN"]),  # one length would be one shape
    ("05_trainium_padding", {"MIN_LEN": 100, "MAX_LENGTH": 100}, ["MIN_LEN"]),
    ("05_trainium_padding", {"N_EXAMPLES": 0}, ["N_EXAMPLES"]),
]  # fmt: skip


@pytest.mark.parametrize("notebook,params,named", REFUSED, ids=[f"{n[:2]}-{p}"[:40] for n, p, _ in REFUSED])
def test_a_value_outside_its_schema_is_refused_naming_the_parameter(notebook, params, named):
    with pytest.raises(LongctxError) as err:
        schema.check(notebook, params)
    assert all(n in str(err.value) for n in named), str(err.value)
    assert ("-y" in str(err.value)) is ("-y" in named)  # papermill's -p passes a list as text: its -y does not


def test_values_at_the_schemas_edges_are_taken():
    schema.check("06_one_million_tokens", {"SEQ_LEN": MAX_TOKENS, "GPUS": 8})
    schema.check("02_yarn", OURS | {"TRAINED_LENGTH": 0})
    schema.check("02_yarn", OURS | {"MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 32768})


def test_a_config_the_estimator_refuses_is_refused_before_a_kernel_starts(tmp_path):
    settings = models.config("qwen3-4b").to_dict()
    models.config("qwen3-4b").save_pretrained(tmp_path)  # a whole config is taken: the same check passes it
    estimating = [n for n in harness.notebooks() if "FULL_MODEL" in schema.schema(n)["properties"]]
    for name in estimating:
        schema.check(name, {"FULL_MODEL": str(tmp_path / "config.json")})
    (tmp_path / "config.json").write_text(json.dumps({**settings, "vocab_size": 10**13}))  # a typo of a vocabulary
    for name in estimating:
        with refused("FULL_MODEL=", "vocab_size"):
            schema.check(name, {"FULL_MODEL": str(tmp_path)})
    assert estimating


def test_the_gpu_counts_a_lesson_takes_are_the_ones_the_cp_check_takes():
    check_plan(models.config("tiny"), 2**20, cp_size=64)
    with refused("cp_size"):
        check_plan(models.config("tiny"), 2**20, cp_size=128)
    for notebook, name in (
        ("06_one_million_tokens", "GPUS"),
        ("06_one_million_tokens", "SECOND_GPUS"),
        ("04_context_parallelism", "RANKS"),
    ):
        prop = schema.schema(notebook)["properties"][name]
        assert prop.get("items", prop)["maximum"] == 64, (notebook, name)


def test_a_model_without_weights_is_refused_where_a_lesson_trains_it(tmp_path):
    models.config("tiny").save_pretrained(tmp_path)  # config.json only
    for value in (str(tmp_path), str(tmp_path / "config.json")):
        with refused("MODEL"):
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
    with pytest.raises(LongctxError) as err:
        schema.check("03_activation_offload", {"MODEL": str(folder)})
    assert "MODEL" in str(err.value) and (layer in str(err.value) or damage not in ("missing-tensor", "nan"))


def test_a_local_dataset_needs_the_splits_the_lesson_reads(tmp_path):
    source = data.data_dir() / "corpus-parquet"
    if not source.is_dir():
        pytest.skip("the parquet copy of the corpus is built by `longctx data`")
    assert data.check_dataset(str(source), splits=("train", "test")) == str(source)
    (tmp_path / "data").mkdir()
    shutil.copy(next(source.glob("data/train-*.parquet")), tmp_path / "data" / "train-00000-of-00001.parquet")
    with refused("'test'"):
        data.check_dataset(str(tmp_path), splits=("train", "test"))
    assert data.check_dataset(str(tmp_path)) == str(tmp_path)  # training text alone is enough elsewhere


@pytest.mark.parametrize("notebook", ["01_chunked_loss", "03_activation_offload", "06_one_million_tokens"])
def test_the_card_a_lesson_holds_its_estimates_against_is_a_known_card_or_gib(notebook):
    path = harness.resolve(notebook)
    for ok in ("A100-80GB", "h200", "79.5"):
        harness.check_parameters(path, {"GPU": ok}, "ci")
    for bad in ("H100", "-1", 79.5):
        with refused("GPU"):
            harness.check_parameters(path, {"GPU": bad}, "ci")
