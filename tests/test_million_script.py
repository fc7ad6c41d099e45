"""scripts/sft_1m_context.py is the guide's recipe as one standalone file: nothing from longctx, the SFTConfig of TRL's
example (YaRN factor 32 on 32,768 positions, offload, padding to 2 x the ranks, the model in bf16), and a CPU rehearsal
of its own code path end to end (a local model folder and parquet copy, a toy length)."""

import ast
import importlib.util
import subprocess
import sys

import pytest

from longctx import guide, models
from longctx.paths import REPO, data_dir

SCRIPT = REPO / "scripts" / "sft_1m_context.py"


def _script():
    spec = importlib.util.spec_from_file_location("sft_1m_context", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_stands_alone():
    imported = set()
    for node in ast.walk(ast.parse(SCRIPT.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= {"argparse", "os", "datasets", "transformers", "trl"}, imported


def test_its_config_is_the_guides_example():
    args = _script().training_args(
        models.config("qwen3-8b"), seq_len=2**20, trained_length=32768, steps=1, out="o", world_size=8,
        use_cpu=True, bf16=False,
    )  # fmt: skip
    init = args.model_init_kwargs
    assert init["rope_parameters"] == guide.EXAMPLE_ROPE_PARAMETERS and init["dtype"] == "bfloat16"
    assert init["max_position_embeddings"] == 2**20 and args.max_length == 2**20
    assert args.pad_to_multiple_of == 16 and args.activation_checkpointing_kwargs == {"offload": True}
    assert args.per_device_train_batch_size == 1 and args.save_strategy == "no"


@pytest.mark.slow
def test_its_code_path_runs_on_a_cpu(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, str(SCRIPT), "--model", str(data_dir() / "yarn-base"), "--dataset", str(data_dir() / "corpus-parquet")]
    cmd += ["--seq-len", "512", "--trained-length", "128", "--steps", "1", "--out", str(out), "--cpu"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "first loss" in done.stdout
    saved = models.config(str(out / "config.json"))
    assert saved.rope_parameters["rope_type"] == "yarn" and saved.rope_parameters["factor"] == 4.0


def test_a_length_inside_the_trained_range_is_refused_before_anything_loads():
    cmd = [sys.executable, str(SCRIPT), "--seq-len", "1024", "--trained-length", "32768", "--cpu"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "inside the 32768 trained positions" in done.stderr and "Traceback" not in done.stderr
