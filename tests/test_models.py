import json

import pytest
import torch

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


def test_a_hub_id_that_cannot_be_reached_names_the_preset_of_its_shape(monkeypatch, tmp_path):
    class Unreachable:
        def head(self, url, timeout):
            assert timeout == models.HUB_TIMEOUT  # bounded: the hub client's own retries took 27 s here
            raise ConnectionError(f"no route to {url}")

    monkeypatch.setattr("huggingface_hub.utils.get_session", Unreachable)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    twin = next(p for p in models.PRESETS.values() if p.hub_id)
    with pytest.raises(LongctxError, match=f"'{twin.name}'"):  # the preset of its shape named
        models.config(twin.hub_id)
    with pytest.raises(LongctxError) as err:  # a hub id no preset stands for: no preset named
        models.config("someone/unknown-model")
    assert "someone/unknown-model" in str(err.value) and "the preset '" not in str(err.value)
    # one in the hub cache is left to the hub client (which reads the cache), however the network stands
    (tmp_path / "models--someone--cached" / "snapshots" / "abc").mkdir(parents=True)  # as the hub client caches it
    (tmp_path / "models--someone--cached" / "snapshots" / "abc" / "config.json").write_text("{}")
    (tmp_path / "models--someone--cached" / "refs").mkdir()
    (tmp_path / "models--someone--cached" / "refs" / "main").write_text("abc")
    assert models.check_fetchable({"someone/cached": "model"}, "this") == []


def test_the_hub_cache_counts_a_model_only_with_its_files_and_a_cached_config_must_name_a_size(monkeypatch, tmp_path):
    class Unreachable:
        def head(self, url, timeout):
            raise ConnectionError("no route")

    monkeypatch.setattr("huggingface_hub.utils.get_session", Unreachable)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # (transformers reads it for the cached config)
    (tmp_path / "models--acme--ghost" / "snapshots").mkdir(parents=True)  # what a download that failed leaves
    with pytest.raises(LongctxError, match="acme/ghost"):
        models.config("acme/ghost")
    ghost = tmp_path / "models--acme--ghost"
    (ghost / "snapshots" / "abc").mkdir()
    (ghost / "snapshots" / "abc" / "config.json").symlink_to(ghost / "blobs" / "gone")  # its blob removed
    (ghost / "refs").mkdir()
    (ghost / "refs" / "main").write_text("abc")
    with pytest.raises(LongctxError, match="acme/ghost"):
        models.config("acme/ghost")
    snapshot = tmp_path / "models--acme--half" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (tmp_path / "models--acme--half" / "refs").mkdir()
    (tmp_path / "models--acme--half" / "refs" / "main").write_text("abc")
    (snapshot / "config.json").write_text('{"model_type": "qwen3"}')  # transformers would fill in Qwen3's defaults
    with pytest.raises(LongctxError, match="acme/half"):
        models.config("acme/half")
    # a model a lesson trains needs its weights cached too: the hub client would retry for minutes in the kernel
    (snapshot / "config.json").write_text(json.dumps(models.config("tiny").to_dict()))
    with pytest.raises(LongctxError, match="acme/half"):
        schema.check("00_memory_primer", {"MODEL": "acme/half"})
    (snapshot / "model.safetensors").write_bytes(b"not safetensors")
    assert models.cached_weights("acme/half")
    with pytest.raises(LongctxError, match="MODEL"):
        schema.check("00_memory_primer", {"MODEL": "acme/half"})  # a cached snapshot is checked as a local folder
    (snapshot / "model.safetensors").unlink()
    (snapshot / "pytorch_model.bin").write_bytes(b"pickled")  # the kind from_pretrained is never asked to load here
    with pytest.raises(LongctxError, match="acme/half"):  # pickled weights only: never loaded, and the hub is out of reach
        schema.check("00_memory_primer", {"MODEL": "acme/half"})
    (snapshot / "pytorch_model.bin").unlink()
    for name in ("config.json", "model.safetensors"):  # sound weights, and no tokenizer: the kernel would wait on the hub
        (snapshot / name).write_bytes((data.data_dir() / "yarn-base" / name).read_bytes())
    with pytest.raises(LongctxError, match="MODEL='acme/half'"):
        schema.check("00_memory_primer", {"MODEL": "acme/half"})
    # a cached config is checked as a local one is, where a lesson estimates it (x-config): before the kernel
    settings = {**models.config("tiny").to_dict(), "vocab_size": 2**40}
    (snapshot / "config.json").write_text(json.dumps(settings))
    with pytest.raises(LongctxError, match="FULL_MODEL='acme/half'"):
        schema.check("01_chunked_loss", {"FULL_MODEL": "acme/half"})
