"""A model folder's own Python code never runs: every load passes trust_remote_code=False, and transformers then
refuses a folder that maps classes to its own files (auto_map) without asking, even with "y" on standard input."""

import builtins
import json
import subprocess
import sys

import pytest
from conftest import refused

from longctx import data, models


@pytest.fixture
def foreign(tmp_path):
    """A folder whose config and tokenizer config point at evil.py, which leaves a marker when imported."""
    marker = tmp_path / "marker"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    cfg = {"model_type": "evil", "auto_map": {"AutoConfig": "evil.Cfg", "AutoModelForCausalLM": "evil.Model"}}
    (folder / "config.json").write_text(json.dumps({**models.config("tiny").to_dict(), **cfg}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.Tok", None]}}))
    return folder, marker


def test_the_cli_refuses_a_folder_with_its_own_code_even_with_yes_piped_in(foreign):
    folder, marker = foreign
    out = subprocess.run(
        [sys.executable, "-m", "longctx", "estimate", "--model", str(folder), "--seq-len", "1k"],
        input="y\n" * 50,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "trust_remote_code=False" in out.stderr
    assert "Traceback" not in out.stderr and "[y/N]" not in out.stdout + out.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "load",
    [models.config, models.load, data.tokenizer_for],
    ids=["config", "weights", "tokenizer"],
)
def test_every_loader_refuses_it_and_asks_nothing(foreign, monkeypatch, load):
    folder, marker = foreign
    monkeypatch.setattr(builtins, "input", lambda *a: "y")  # a prompt, were there one, would be answered yes
    with refused("trust_remote_code=False"):
        load(str(folder))
    assert not marker.exists()


def test_pickled_weights_are_never_loaded(tmp_path):
    """A pytorch_model.bin is a pickle, which can run code as it is read: a folder holding only that is refused
    before a kernel starts, and loading asks transformers for safetensors."""
    from longctx.run import harness

    folder = tmp_path / "pickled"
    folder.mkdir()
    models.config("tiny").save_pretrained(folder)
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    with refused("MODEL"):
        harness.run("00", "ci", {"MODEL": str(folder)}, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with refused(str(folder)):  # the folder named, nothing loaded
        models.load(str(folder))
