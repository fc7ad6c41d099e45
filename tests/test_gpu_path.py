"""The `gpu` size's code paths, checked on the CPU: what each size needs and the refusal of a machine
that lacks it, the tracker's device key, the text sources, the dtype the full-size runs load."""

import json
import re

import torch
from conftest import refused
from transformers import AutoTokenizer
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
from trl import SFTConfig

from longctx import data, models
from longctx.memory.estimate import build_step
from longctx.memory.measure import TimelineTracker, measure, tensor_device
from longctx.paths import REPO, data_dir
from longctx.run import harness, needs
from longctx.run.cp_worker import deepspeed_config
from longctx.tools import sweep
from longctx.tools.cli import main

NOTEBOOKS = list(harness.notebooks())


# -- the tracker's device key (every CUDA profile was zero: it looked up "cuda", tensors say "cuda:0")


def test_a_tracker_counts_the_same_bytes_whatever_the_device_spelling():
    cfg = models.config("tiny")

    def peak(device):
        net, optimizer, step = build_step(cfg, 64, loss="chunked", checkpointing=True)
        tracker = TimelineTracker(device)
        tracker.track_external(net, optimizer)
        with tracker:
            tracker.record()
            step()
            tracker.record()
        return tracker.profile("memtracker").peak_bytes

    reference = peak("cpu")
    assert reference > 0 and all(peak(s) == reference for s in ("cpu:0", torch.device("cpu", 0)))
    net, optimizer, step = build_step(cfg, 64)
    profile = measure(step, model=net, optimizer=optimizer, device="cpu:0")  # measure takes an indexed device
    assert profile.peak_bytes > profile.at_end()["parameters"] > 0
    assert tensor_device("cpu:0") == torch.empty(0, device="cpu:0").device == torch.device("cpu")
    assert tensor_device("meta") == torch.empty(0, device="meta").device


# -- text: PG-19's parquet copy, script-only ids refused, the model's own tokenizer on the corpus


def test_a_script_only_dataset_is_refused_naming_its_parquet_copy():
    with refused("emozilla/pg19") as err:
        data.long_sequences(64, 1, dataset="deepmind/pg19", tokenizer=data.tokenizer())
    assert "Dataset scripts are no longer supported" in str(err.value)
    assert data.check_dataset("pg19") == data.PG19 == "emozilla/pg19"  # pg19 means the parquet copy


def test_the_parquet_export_loads_through_the_hub_code_path():
    folder = data.export_parquet()
    assert sorted(p.name for p in (folder / "data").glob("*.parquet")) == [
        "test-00000-of-00001.parquet",
        "train-00000-of-00001.parquet",
    ]
    tok = data.tokenizer_for(str(data_dir() / "yarn-base"))
    held = data.long_sequences(256, 2, "validation", dataset=str(folder), tokenizer=tok, seed=None)
    # the test split is the corpus's held-out books, read in order: the first window is their first tokens
    expected = tok(data.books("validation")[0].text)["input_ids"][:256]
    assert held["input_ids"][0] == expected


def test_a_model_reads_the_corpus_through_its_own_tokenizer():
    gpt2_like = AutoTokenizer.from_pretrained(str(data_dir() / "yarn-base"))
    gpt2_like.name_or_path = "another-model"  # the same BPE under another name: the slow path, tokenized anew
    ids = data.long_sequences(128, 1, tokenizer=gpt2_like, seed=None)["input_ids"][0]
    assert ids == data.long_sequences(128, 1, seed=None)["input_ids"][0]
    assert data.tokenizer_for("tiny").name_or_path == data.tokenizer().name_or_path


# -- the dtype the full-size runs load is the one every estimate assumes


def test_models_load_in_the_dtype_asked():
    assert next(models.load("tiny", dtype="bf16").parameters()).dtype == torch.bfloat16
    assert next(models.load(str(data_dir() / "yarn-base"), dtype="bf16").parameters()).dtype == torch.bfloat16
    with refused("bfloat"):
        models.load("tiny", dtype="bfloat")


# -- what each size needs, declared once and checked before a kernel starts


def test_a_small_card_is_refused_naming_its_memory(hub_cache):
    hub_cache("Qwen/Qwen3-4B", {"config.json": "{}"})  # downloaded before: no network
    forty = needs.Machine("cuda", (40 * 10**9,))
    with refused("80 GB", "40 GB"):  # what it needs, what this machine has
        needs.check("02_yarn", "gpu", {}, have=forty)
    eighty = needs.Machine("cuda", (85_520_000_000,))  # what an "80 GB" H100 reports
    assert needs.check("02_yarn", "gpu", {"MODEL": "Qwen/Qwen3-4B"}, have=eighty).gpus == 1
    with refused("8 CUDA GPUs", "1 CUDA device"):
        needs.check("04_context_parallelism", "gpu", {}, have=eighty)


def test_offline_hub_without_the_cache_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    h200 = needs.Machine("cuda", (150 * 10**9,))
    with refused("HF_HUB_OFFLINE"):
        needs.check("02_yarn", "gpu", {"MODEL": "Qwen/Qwen3-4B"}, have=h200)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "yes")  # the older name, which the hub client reads too: named as given
    with refused("TRANSFORMERS_OFFLINE"):
        needs.check("02_yarn", "gpu", {"MODEL": "Qwen/Qwen3-4B"}, have=h200)
    # a local model folder needs no hub
    needs.check("02_yarn", "gpu", {"MODEL": str(data_dir() / "yarn-base"), "DATASET": "corpus"}, have=h200)
    # a CPU size told to load a hub id is refused the same way, before a kernel starts
    with refused("Qwen/Qwen3-0.6B"):
        needs.check("01_chunked_loss", "ci", {"MODEL": "Qwen/Qwen3-0.6B"})


def test_sweeps_and_figures_check_the_machine_before_any_point(tmp_path):
    sw = sweep.Sweep("04", "gpu", {"SEQ_LEN": [65536, 131072]}, out=tmp_path / "sw")
    with refused("8 CUDA GPUs"):
        sweep.run(sw, progress=False)
    assert not list((tmp_path / "sw" / "points").glob("*"))
    from longctx.tools import figures

    with refused("needs"):
        figures.regenerate("gpu", tmp_path / "fig", progress=False)


def test_list_shows_needs_and_minutes_for_every_size(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in NOTEBOOKS:
        assert name in out
    sizes = sum(len(harness.sizes(nb)) for nb in harness.notebooks().values())
    assert out.count("stopped after ") == sizes and out.count(" min") == 2 * sizes  # its minutes and its time limit
    assert needs.markdown() in (REPO / "README.md").read_text()  # the README carries the same table


def test_the_ulysses_deepspeed_config_takes_its_numbers_from_the_sftconfig(tmp_path):
    """ "auto" values: transformers fills them from the trainer's arguments, where fixed ones that differ would be refused
    when a trainer starts (a reader's SFTConfig has its own learning rate and batch)."""
    args = SFTConfig(str(tmp_path), bf16=False, learning_rate=2e-5, per_device_train_batch_size=2, gradient_accumulation_steps=4)
    ds = HfTrainerDeepSpeedConfig(deepspeed_config())
    ds.trainer_config_process(args)
    assert ds.mismatches == []
    assert ds.config["optimizer"]["params"]["lr"] == 2e-5 and ds.config["optimizer"]["params"]["torch_adam"]  # no JIT build
    assert (ds.config["train_micro_batch_size_per_gpu"], ds.config["gradient_accumulation_steps"]) == (2, 4)


def test_the_readme_quotes_the_committed_gpu_report():
    """The README's GPU figures are read off the report the H200 run wrote (benchmarks/results/), not typed apart."""
    rows = json.loads((REPO / "benchmarks/results/gpu_check-h200-2026-12-04/2-tracker-fixed/gpu_check.json").read_text())
    ratios = [r["estimate_over_allocator"] for r in rows["measure"]["estimates"] if "estimate_over_allocator" in r]
    quoted = re.search(
        r"within ([\d.]+)–([\d.]+)×\s+of the CUDA allocator's peak in all (\d+) steps", (REPO / "README.md").read_text()
    )
    assert quoted, "the README's GPU sentence changed: update this test"
    assert (float(quoted[1]), float(quoted[2]), int(quoted[3])) == (round(min(ratios), 3), round(max(ratios), 3), len(ratios))
