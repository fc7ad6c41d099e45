import pytest
import torch

from longctx import LongctxError, models


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


def test_config_from_file(tmp_path):
    models.config("tiny").save_pretrained(tmp_path)
    cfg = models.config(str(tmp_path / "config.json"))
    assert cfg.hidden_size == models.PRESETS["tiny"].config["hidden_size"]


def test_a_hub_id_that_cannot_be_reached_names_the_preset_of_its_shape(monkeypatch):
    def unreachable(cls, source, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(models, "from_pretrained", unreachable)
    twin = next(p for p in models.PRESETS.values() if p.hub_id)
    with pytest.raises(LongctxError, match=f"connect.*Without the network, the preset '{twin.name}' has its shape"):
        models.config(twin.hub_id)
    with pytest.raises(LongctxError, match=r"to load the files$"):  # a hub id no preset stands for: nothing added
        models.config("someone/unknown-model")
