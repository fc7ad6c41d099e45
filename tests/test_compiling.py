import pytest
import torch
from conftest import refused
from trl import SFTConfig, SFTTrainer

from longctx import data, models, train
from longctx.levers import compiling, neuron, padding


def _trainer(tmp_path, dataset, **args):
    """An SFTTrainer on the tiny preset, as a lesson builds one."""
    config = SFTConfig(output_dir=str(tmp_path), **args, **train.on_this_machine())
    return SFTTrainer(model=models.load("tiny"), args=config, train_dataset=dataset, processing_class=data.tokenizer())


def test_auto_and_good_padding_follow_trl_and_a_max_length_off_the_multiple_is_refused():
    with refused("max_length"):  # (the multiple itself: the lesson's schema, x-pad)
        padding.check_padding(128, 500)
    assert padding.check_padding("auto", 512, "neuron") == 128 and padding.check_padding("auto", 500, "cpu") is None
    assert padding.check_padding(64, 512) == 64 and padding.check_padding(None, 500) is None


@pytest.mark.parametrize("cores,ok", [("0,1", True), ("2,3", True), ("0-3", True), ("1,2", False), ("0,2", False)])
def test_neuron_core_sets(cores, ok):
    if ok:
        assert neuron.check_neuron_cores(cores)
    else:
        with refused("NEURON_RT_VISIBLE_CORES"):
            neuron.check_neuron_cores(cores)


def test_census_reads_the_trainers_collator(tmp_path):
    ds = data.varied_sequences(16, 8, 100, seed=0)
    shapes = {}
    for pad in (None, 32):
        trainer = _trainer(tmp_path, ds, max_steps=4, per_device_train_batch_size=4, max_length=128, pad_to_multiple_of=pad)
        census = padding.shape_census(trainer, 4)
        shapes[pad] = census.distinct
    assert all(s[1] % 32 == 0 for s in shapes[32])
    assert len(shapes[32]) <= len(shapes[None])


@pytest.mark.parametrize("batch", [2, 64])
def test_the_compile_probes_two_batches_are_two_shapes_at_any_batch_size(tmp_path, batch):
    """Lesson 05's probe, read in order: drawn at random, 64 rows of 8 to 16 tokens padded both batches to 16."""
    rows = data.probe_batches(batch, 8, 16, seed=1)
    trainer = _trainer(tmp_path, rows, max_steps=2, per_device_train_batch_size=batch, max_length=16,
                       train_sampling_strategy="sequential")  # fmt: skip
    census = padding.shape_census(trainer, 2)
    assert [shape[1] for shape in census.shapes] == [16, max(map(len, rows["input_ids"][batch:]))]  # in order
    assert min(map(len, rows["input_ids"])) >= 8


def test_counter_counts_one_compile_per_shape_and_no_shape_falls_back_to_eager():
    fn = torch.compile(lambda x: (x * 2).sum(), backend="eager")
    with compiling.compile_settings(fresh_cache=False), compiling.CompileCounter() as counter:
        for n in (3, 4, 5, 3):  # dynamic shapes off: one compile per new shape
            fn(torch.ones(n))
    assert counter.count == 3 and counter.by_trigger() == {"DYNAMO": 3}
    fn = torch.compile(lambda x: x + 1, backend="eager")
    with compiling.compile_settings(fresh_cache=False), compiling.CompileCounter() as counter:
        for n in range(1, 13):  # more shapes than dynamo's default recompile limit of 8, which longctx raises
            fn(torch.ones(n))
    assert counter.count == 12


def test_compile_structure_from_a_probe_and_its_refusal():
    def probe(shapes, step_compiles):
        return compiling.CompiledRun(None, padding.Census(shapes), shapes, compiling.CompileCounter(), 0.0, step_compiles)

    structure = compiling.compile_structure(probe([(4, 96), (4, 128)], [5, 2]))
    assert (structure.per_shape, structure.once) == (2, 3)
    assert structure.predict(padding.Census([(4, 64), (4, 96), (4, 64)])) == 3 + 2 * 2
    with refused("probe"):  # two batches of one shape cannot tell the two apart
        compiling.compile_structure(probe([(4, 96), (4, 96)], [5, 0]))


def test_compiled_run_refuses_a_trainer_that_does_not_compile(tmp_path):
    trainer = _trainer(tmp_path, data.long_sequences(32, 4), max_steps=1)
    with refused("torch_compile=True"):
        compiling.compiled_run(trainer)
