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


@pytest.mark.parametrize(
    "params,fragment",
    [
        ({"SHARDS": 8}, r"must be a list, not int 8 \(a list is written in brackets: -p 'SHARDS=\[8\]'\)"),
        ({"SEQ_LEN": "1M"}, r"must be a whole number, not str '1M' \(write 1M as -p SEQ_LEN=1048576\)"),
        ({"SEQ_LEN": "long"}, r"must be a whole number, not str 'long'\.$"),
    ],
    ids=["a-scalar-for-a-list", "a-length-with-a-suffix", "no-number-at-all"],
)
def test_a_wrong_type_is_refused_with_the_form_the_value_takes(params, fragment):
    with pytest.raises(LongctxError, match=fragment):
        schema.check("07_tiled_mlp", params)


def test_a_model_without_weights_is_refused_where_a_lesson_trains_it(tmp_path):
    models.config("tiny").save_pretrained(tmp_path)  # config.json only
    for value in (str(tmp_path), str(tmp_path / "config.json")):
        with pytest.raises(LongctxError, match="no weights"):
            schema.check("03_activation_offload", {"MODEL": value})
    schema.check("03_activation_offload", {"MODEL": str(tmp_path)}, weights=False)  # a dry run: weights come later
    schema.check("06_one_million_tokens", {"MODEL": str(tmp_path / "config.json"), "GPUS": 8, "SEQ_LEN": 4096})
    schema.check("03_activation_offload", {"MODEL": str(data.data_dir() / "yarn-base")})  # a folder with weights
    damaged = tmp_path / "damaged"
    shutil.copytree(data.data_dir() / "yarn-base", damaged)
    (damaged / "tokenizer.json").write_text("")  # emptied: refused by name, not in the kernel's third cell
    with pytest.raises(LongctxError, match=r"holds a tokenizer it cannot use: .*tokenizer.json cannot be read as a tokenizer"):
        schema.check("03_activation_offload", {"MODEL": str(damaged)})
    import torch
    from safetensors.torch import load_file, save_file

    other = tmp_path / "other"
    shutil.copytree(data.data_dir() / "yarn-base", other)
    weights = load_file(other / "model.safetensors")
    weights["model.embed_tokens.weight"] = torch.zeros(5, 7)  # another model's tensor under the same name
    save_file(weights, other / "model.safetensors")
    with pytest.raises(LongctxError, match=r"model.embed_tokens.weight is \[5, 7\], but .*config.json builds \[4096, "):
        schema.check("03_activation_offload", {"MODEL": str(other)})
    schema.check("03_activation_offload", {"MODEL": "Qwen/Qwen3-0.6B"})  # a hub id: its weights come with it


@pytest.mark.parametrize(
    "damage",
    [
        "int8",
        "missing-tensor",
        "extra-tensor",
        "adapter-without-its-weights",
        "stray-file",
        "missing-shard",
        "index-a-list",
        "dangling-link",
        "nan",
        "huge",
        "tokenizer-{}",
        "tokenizer-link",
        "no-tokenizer",
        "more-ids",
        "70000-layers",
        "an-index-beside-model-safetensors",
        "weights-the-config-names",
        "weights-the-config-names-outside",
        "rope-theta-0",
        "yarn-factor-0",
    ],
)
def test_a_model_folder_transformers_would_load_wrongly_is_refused_by_file(tmp_path, damage):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(data.data_dir() / "yarn-base", folder)
    weights, file = load_file(folder / "model.safetensors"), folder / "model.safetensors"
    first = sorted(weights)[0]
    if damage == "int8":  # quantized numbers where the model trains floats: it would train from near zero
        save_file({**weights, first: weights[first].to(torch.int8)}, file)
        why = rf"{first} holds I8 numbers, not floating point"
    elif damage == "missing-tensor":  # transformers would start it from random numbers, saying so only in its log
        save_file({k: v for k, v in weights.items() if k != first}, file)
        why = rf"safetensors hold no {first} \(1 tensor\(s\) missing\)"
    elif damage == "extra-tensor":  # a config cut to fewer layers than were saved: transformers drops the rest
        save_file({**weights, "model.layers.99.mlp.up_proj.weight": weights[first].clone()}, file)
        why = r"hold model.layers.99.mlp.up_proj.weight \(1 tensor\(s\)\), which .*config.json does not build"
    elif damage == "adapter-without-its-weights":  # transformers loads a PEFT adapter it names, as the lesson would
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "x/y"}))
        why = r"transformers cannot load and step it as the lessons do \(FileNotFoundError: .*adapter_model.safetensors"
    elif damage == "stray-file":  # the tensor is in a file beside it, which transformers never reads
        save_file({k: v for k, v in weights.items() if k != first}, file)
        save_file({first: weights[first]}, folder / "zz-backup.safetensors")
        why = rf"safetensors hold no {first} \(1 tensor\(s\) missing\)"
    elif damage == "nan":  # it would train on NaN
        save_file({**weights, first: weights[first] * float("nan")}, file)
        why = rf"{first} holds NaN or infinite numbers"
    elif damage == "huge":  # finite, but a step overflows: it would train on NaN
        save_file({k: torch.full_like(v, 3e37) for k, v in weights.items()}, file)
        why = r"one training step on 16 tokens gives an infinite or NaN gradient, though every weight is finite: .* 3e\+37"
    elif damage == "missing-shard":  # (a sharded model: its index, and no model.safetensors, which is read first)
        file.unlink()
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {first: "model-2-of-2.safetensors"}}))
        why = "names model-2-of-2.safetensors, which is not in"
    elif damage == "index-a-list":
        file.unlink()
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": [first]}))
        why = "model.safetensors.index.json does not map tensor names to shard files"
    elif damage == "dangling-link":
        file.unlink()
        file.symlink_to(tmp_path / "gone.safetensors")
        why = "model.safetensors is a link to nothing"
    elif damage == "tokenizer-{}":
        (folder / "tokenizer.json").write_text("{}")
        why = "tokenizer.json cannot be read as a tokenizer"
    elif damage == "tokenizer-link":
        (folder / "tokenizer.json").unlink()
        (folder / "tokenizer.json").symlink_to(tmp_path / "gone.json")
        why = r"tokenizer.json is a link to nothing \(or a loop of links\); a model folder holds what save_pretrained wrote"
    elif damage == "no-tokenizer":  # transformers 5 would build an empty tokenizer of one token, every word unknown
        for file in folder.glob("tokenizer*"):
            file.unlink()
        why = r"holds no tokenizer: \w+ reads its vocabulary from .*tokenizer.json, and none is there"
    elif damage == "an-index-beside-model-safetensors":  # transformers reads model.safetensors first, the index unread
        save_file({k: v.clone() for k, v in weights.items()}, folder / "model-1-of-1.safetensors")
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": dict.fromkeys(weights, "model-1-of-1.safetensors")})
        )
        save_file({**weights, first: weights[first] * float("nan")}, file)
        why = rf"model.safetensors: {first} holds NaN or infinite numbers"
    elif damage.startswith("weights-the-config-names"):  # transformers_weights: the one file transformers then reads
        save_file({**weights, first: weights[first] * float("nan")}, folder / "other.safetensors")
        named = "other.safetensors" if damage.endswith("names") else "../model/other.safetensors"
        settings = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**settings, "transformers_weights": named}))
        why = rf"other.safetensors: {first} holds NaN" if damage.endswith("names") else r"names '\.\./model/other.safetensors'"
    elif damage == "yarn-factor-0":  # named as the config's, not as weights too large
        settings = json.loads((folder / "config.json").read_text())
        yarn = {"rope_type": "yarn", "factor": 0.0, "original_max_position_embeddings": 128}
        settings["rope_parameters"] = {**(settings.get("rope_parameters") or {}), **yarn}
        (folder / "config.json").write_text(json.dumps(settings))
        why = r"rope_parameters factor is 0.0: it must be positive"
    elif damage == "rope-theta-0":  # its step's angles are infinite: named as the config's, not as the weights'
        settings = json.loads((folder / "config.json").read_text())
        rope = settings.get("rope_parameters") or {}
        settings |= {"rope_parameters": {**rope, "rope_theta": 0}} if rope else {"rope_theta": 0}
        (folder / "config.json").write_text(json.dumps(settings))
        why = r"rope_theta is 0: it must be above 1 \(RoPE's base"
    elif damage == "70000-layers":  # refused before its model is built: the shapes alone took 90 s
        settings = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**settings, "num_hidden_layers": 70000, "layer_types": None}))
        why = f"num_hidden_layers is 70,000: over the {models.CONFIG_LIMITS['num_hidden_layers']:,} longctx takes"
    else:  # a vocabulary smaller than the tokenizer's ids: the embedding would be indexed out of range
        settings = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**settings, "vocab_size": 1000}))
        save_file({k: v[:1000] if v.shape[0] == settings["vocab_size"] else v for k, v in weights.items()}, file)
        why = rf"has a tokenizer of {data.VOCAB_SIZE:,} tokens, but .*config.json builds a vocabulary of 1,000"
    with pytest.raises(LongctxError, match=why):
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
    for bad, fragment in (
        ("H100", "Unknown GPU 'H100'; use one of H100-80GB"),
        ("-1", "must be a positive number"),
        (79.5, "quote it to pass it as text"),
    ):
        with pytest.raises(LongctxError, match=fragment):
            harness.check_parameters(path, {"GPU": bad}, "ci")


def test_the_padding_lessons_lengths_are_bounded_by_its_schema():  # data.varied_sequences trusts them
    for bad, fragment in (
        ({"MIN_LEN": 200, "MAX_LENGTH": 100}, "MIN_LEN=200 must be below MAX_LENGTH"),
        ({"MIN_LEN": 100, "MAX_LENGTH": 100}, r"MIN_LEN=100 must be below MAX_LENGTH \(100\)"),  # one length, one shape
        ({"N_EXAMPLES": 0}, "N_EXAMPLES=0 must be positive"),
    ):
        with pytest.raises(LongctxError, match=fragment):
            schema.check("05_trainium_padding", bad)
