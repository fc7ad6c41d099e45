import pytest

from longctx import LongctxError, harness
from longctx.cli import main


def test_unknown_notebook():
    with pytest.raises(LongctxError, match="Unknown notebook 'nope'. Available: 00_memory_primer"):
        harness.run("nope", "ci")


def test_notebook_resolves_by_number_and_title():
    assert harness.resolve("00").stem == harness.resolve("memory_primer").stem == "00_memory_primer"


def test_unknown_size():
    with pytest.raises(LongctxError, match="Unknown size 'huge'"):
        harness.run("00", "huge")


def test_missing_size_file(tmp_path, monkeypatch):
    nb = harness.resolve("00")
    with pytest.raises(LongctxError, match="Available sizes: ci, cpu, gpu"):
        harness.size_params(nb, "tpu")


def test_unknown_parameter_is_named_with_the_valid_ones():
    with pytest.raises(LongctxError, match="has no parameter 'SEQLEN'.*SEQ_LEN"):
        harness.run("00", "ci", {"SEQLEN": 64})


@pytest.mark.parametrize("key,value", [("SEQ_LEN", "long"), ("SEQ_LEN", 1.5), ("LEARNING_RATE", "fast"),
                                       ("MODEL", 3), ("SEQ_LEN", True)])
def test_wrong_type_is_refused(key, value):
    with pytest.raises(LongctxError, match=f"{key} must be"):
        harness.run("00", "ci", {key: value})


def test_overrides_parse_as_yaml_scalars():
    assert harness.parse_overrides(["SEQ_LEN=4096", "LEARNING_RATE=1e-3", "MODEL=tiny"]) == {
        "SEQ_LEN": 4096, "LEARNING_RATE": 1e-3, "MODEL": "tiny"}
    with pytest.raises(LongctxError, match="KEY=VALUE"):
        harness.parse_overrides(["SEQ_LEN"])


def test_every_size_file_names_only_declared_parameters():
    for name, nb in harness.notebooks().items():
        assert set(harness.sizes(nb)) >= {"ci", "cpu", "gpu"}, name
        for size in harness.sizes(nb):
            harness.check_parameters(nb, harness.size_params(nb, size))


def test_cli_reports_errors_with_exit_code_2(capsys):
    assert main(["run", "00", "--size", "ci", "-p", "BOGUS=1"]) == 2
    assert "has no parameter 'BOGUS'" in capsys.readouterr().err
