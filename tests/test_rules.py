"""Parameter values a lesson cannot use, refused by the harness before a kernel starts."""

import shutil

import pytest

from longctx import LongctxError, data, models
from longctx.run import rules


def test_a_length_the_estimator_refuses_is_refused_before_a_kernel_starts():
    from longctx.lengths import MAX_TOKENS

    rules.check("06_one_million_tokens", {"SEQ_LEN": MAX_TOKENS, "GPUS": 8})
    with pytest.raises(LongctxError, match="estimator"):
        rules.check("06_one_million_tokens", {"SEQ_LEN": 2 * MAX_TOKENS, "GPUS": 8})
    with pytest.raises(LongctxError, match="estimator"):
        rules.check("01_chunked_loss", {"FULL_LENGTHS": [98304, 1.5]})


def test_a_model_without_weights_is_refused_where_a_lesson_trains_it(tmp_path):
    models.config("tiny").save_pretrained(tmp_path)  # config.json only
    for value in (str(tmp_path), str(tmp_path / "config.json")):
        with pytest.raises(LongctxError, match="no weights"):
            rules.check("03_activation_offload", {"MODEL": value})
    rules.check("03_activation_offload", {"MODEL": str(tmp_path)}, weights=False)  # a dry run: weights come later
    rules.check("06_one_million_tokens", {"MODEL": str(tmp_path / "config.json"), "GPUS": 8, "SEQ_LEN": 4096})
    rules.check("03_activation_offload", {"MODEL": str(data.data_dir() / "yarn-base")})  # a folder with weights
    rules.check("03_activation_offload", {"MODEL": "Qwen/Qwen3-0.6B"})  # a hub id: its weights come with it


def test_yarn_on_another_model_needs_its_trained_length():
    rules.check("02_yarn", {"MODEL": "base", "TRAINED_LENGTH": 0})
    rules.check("02_yarn", {"MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 32768})
    with pytest.raises(LongctxError, match="TRAINED_LENGTH=0 must be set when MODEL is not 'base'"):
        rules.check("02_yarn", {"MODEL": "Qwen/Qwen3-4B", "TRAINED_LENGTH": 0})


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
    from longctx.run import harness

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


def test_a_length_no_step_on_this_machine_could_hold_is_refused_before_a_kernel_starts(monkeypatch):
    from types import SimpleNamespace

    import psutil

    from longctx.run import harness

    with pytest.raises(LongctxError, match=r"needs at least [\d.]+ GiB \(what each layer must keep\).*lower it"):
        harness.check_parameters(harness.resolve("00"), {"SEQ_LEN": 10**9}, "cpu")  # from the config: instant
    with pytest.raises(LongctxError, match="and the logits"):
        harness.check_parameters(harness.resolve("01"), {"SEQ_LEN": 2**18}, "cpu")
    rules.check("00_memory_primer", {"MODEL": "small", "SEQ_LEN": 10**9, "BATCH": 8}, on_cpu=False)  # a GPU's own
    # every length a lesson measures with a real step, not only SEQ_LEN: a list's lengths and 01's estimator check
    for name, params in (("01", {"CPU_LENGTHS": [128, 4096000]}), ("03", {"CPU_LENGTHS": [10**9]})):
        with pytest.raises(LongctxError, match=rf"{next(iter(params))}=.*needs at least [\d.]+ GiB.*lower it"):
            harness.check_parameters(harness.resolve(name), params, "cpu")
    # near the memory and too long to estimate in seconds (4M tokens: a real step needs more than this machine has)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=23 * 2**30))
    with pytest.raises(LongctxError, match=r"CHECK_LEN=4194304 is too long a CPU step to clear.*at most 262,144 tokens"):
        harness.check_parameters(harness.resolve("01"), {"CHECK_LEN": 2**22}, "cpu")
    # near the machine's memory the config's floor is not enough: the step's estimate decides
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=0.08 * 2**30))
    with pytest.raises(LongctxError, match=r"needs about [\d.]+ GiB \(estimate\) for one training step of deep"):
        harness.check_parameters(harness.resolve("03"), {}, "cpu")


def test_every_whole_number_parameter_has_an_upper_bound():
    from longctx.run import harness, rules

    bounded = ("max", "at_most", "estimable", "seed", "fits_ram", "processes", "one_of")

    def bounds(rule) -> bool:
        if isinstance(rule, list):
            return any(bounds(r) for r in rule)
        if isinstance(rule, dict):
            ((kind, arg),) = rule.items()
            return kind in bounded or (kind == "each" and bounds(arg))
        return rule in bounded

    loose = [
        f"{name}.{key}"
        for name, path in harness.notebooks().items()
        for key, default in harness.declared_parameters(path).items()
        if (isinstance(default, int) and not isinstance(default, bool))
        or (isinstance(default, list) and default and all(isinstance(v, int) for v in default))
        if not bounds(rules.table().get(name, {}).get(key))
    ]
    assert loose == []
