import json

import pytest
import torch
from conftest import refused

from longctx import LongctxError, data, models
from longctx.run import schema


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(LongctxError) as exc:
        models.load("qwen3-5b")
    for name in models.PRESETS:
        assert name in str(exc.value)


# The Qwen3 model cards state 0.6B, 4.0B and 8.2B parameters; our hand-written configs must agree.
@pytest.mark.parametrize("name,billions", [("qwen3-0.6b", 0.6), ("qwen3-4b", 4.0), ("qwen3-8b", 8.2)])
def test_full_size_configs_match_published_sizes(name, billions):
    with torch.device("meta"):
        model = models.load(name)
    assert round(models.n_params(model) / 1e9, 1) == billions


def test_preset_is_seeded():
    a, b = models.load("tiny", seed=3), models.load("tiny", seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_a_hub_id_that_cannot_be_reached_names_the_preset_of_its_shape(hub_cache):
    twin = next(p for p in models.PRESETS.values() if p.hub_id)
    with refused(f"'{twin.name}'"):  # the preset of its shape named
        models.config(twin.hub_id)
    with pytest.raises(LongctxError) as err:  # a hub id no preset stands for: no preset named
        models.config("someone/unknown-model")
    assert "someone/unknown-model" in str(err.value) and "the preset '" not in str(err.value)
    # one in the hub cache is left to the hub client (which reads the cache), however the network stands
    hub_cache("someone/cached", {"config.json": "{}"})
    assert models.check_fetchable({"someone/cached": "model"}, "this") == []


def test_the_hub_cache_counts_a_model_only_with_its_files_and_a_cached_config_must_name_a_size(hub_cache, tmp_path):
    (tmp_path / "models--acme--ghost" / "snapshots").mkdir(parents=True)  # what a download that failed leaves
    with refused("acme/ghost"):
        models.config("acme/ghost")
    ghost = tmp_path / "models--acme--ghost"
    (ghost / "snapshots" / "abc").mkdir()
    (ghost / "snapshots" / "abc" / "config.json").symlink_to(ghost / "blobs" / "gone")  # its blob removed
    (ghost / "refs").mkdir()
    (ghost / "refs" / "main").write_text("abc")
    with refused("acme/ghost"):
        models.config("acme/ghost")
    snapshot = hub_cache("acme/half", {"config.json": '{"model_type": "qwen3"}'})  # transformers would fill in defaults
    with refused("acme/half"):
        models.config("acme/half")
    # a model a lesson trains needs its weights cached too: the hub client would retry for minutes in the kernel
    (snapshot / "config.json").write_text(json.dumps(models.config("tiny").to_dict()))
    with refused("acme/half"):
        schema.check("00_memory_primer", {"MODEL": "acme/half"})
    (snapshot / "model.safetensors").write_bytes(b"not safetensors")
    assert models.cached_weights("acme/half")
    with refused("MODEL"):
        schema.check("00_memory_primer", {"MODEL": "acme/half"})  # a cached snapshot is checked as a local folder
    (snapshot / "model.safetensors").unlink()
    (snapshot / "pytorch_model.bin").write_bytes(b"pickled")  # the kind from_pretrained is never asked to load here
    with refused("acme/half"):  # pickled weights only: never loaded, and the hub is out of reach
        schema.check("00_memory_primer", {"MODEL": "acme/half"})
    (snapshot / "pytorch_model.bin").unlink()
    for name in ("config.json", "model.safetensors"):  # sound weights, and no tokenizer: the kernel would wait on the hub
        (snapshot / name).write_bytes((data.data_dir() / "yarn-base" / name).read_bytes())
    with refused("MODEL='acme/half'"):
        schema.check("00_memory_primer", {"MODEL": "acme/half"})
    # a cached config is checked as a local one is, where a lesson estimates it (x-config): before the kernel
    settings = {**models.config("tiny").to_dict(), "vocab_size": 2**40}
    (snapshot / "config.json").write_text(json.dumps(settings))
    with refused("FULL_MODEL='acme/half'"):
        schema.check("01_chunked_loss", {"FULL_MODEL": "acme/half"})
