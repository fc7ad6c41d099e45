"""A training step's memory timeline for N identical decoder layers, from the traces of 3 and 4 layers."""

import copy
import itertools

import numpy as np
import torch

TRACED = (3, 4)  # the depths traced: the smallest with one, and with two, middle layers
# config keys that make one decoder layer differ from another (dense layers before MoE ones, MoE every k-th layer)
PER_LAYER = ("mlp_only_layers", "first_k_dense_replace", "decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step")
UNIFORM = (None, 0, 1, [], ())  # their values that leave every layer alike


class NotRepeating(Exception):
    """The traces are not one stretch per identical layer: trace the whole stack instead."""


def identical_layers(text) -> bool:
    """Whether the config builds every decoder layer alike: no per-layer list (layer_types: sliding and full
    attention) with two different entries, no key that mixes dense and expert layers."""
    lists = [v for v in vars(text).values() if isinstance(v, (list, tuple)) and len(v) == text.num_hidden_layers]
    return all(len({repr(x) for x in v}) == 1 for v in lists) and all(getattr(text, k, None) in UNIFORM for k in PER_LAYER)


def shrunk(cfg, layers: int):
    """A copy of `cfg` with `layers` decoder layers (per-layer lists cut to match)."""
    cfg = copy.deepcopy(cfg)
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    for key, value in vars(text).items():
        if isinstance(value, (list, tuple)) and len(value) == text.num_hidden_layers:
            setattr(text, key, type(value)(value[:layers]))
    text.num_hidden_layers = layers
    return cfg


def _stretches(trace: dict) -> list[tuple[int, str, int, int]]:
    """(layer or -1, phase, first row, end row) of each run of rows with the same layer and phase. Rows between two
    layers of one pass (FSDP2's hooks under CP) belong to the layer before them."""
    runs = [(key, len(list(run))) for key, run in itertools.groupby(zip(trace["layers"], trace["phases"]))]
    for i in range(len(runs) - 2, 0, -1):
        (before, phase), ((this, ph), size), (after, ph_after) = runs[i - 1][0], runs[i], runs[i + 1][0]
        if this < 0 <= min(before, after) and phase == ph == ph_after:
            runs[i - 1 : i + 1] = [((before, phase), runs[i - 1][1] + size)]
    ends = np.cumsum([size for _, size in runs])
    return [(layer, phase, int(end - size), int(end)) for ((layer, phase), size), end in zip(runs, ends)]


def extend(small: dict, large: dict, depth: int) -> dict:
    """The trace of `depth` layers from those of TRACED[0] (`small`) and TRACED[1] (`large`) layers."""
    k_small, k_large = TRACED
    cols = [np.column_stack([t["rows"], t["host"], t["bands"], t["costs"]]) for t in (small, large)]
    width = large["costs"].shape[1]
    parts = [_stretches(t) for t in (small, large)]
    layers = [{(layer, phase): cols[w][a:b] for layer, phase, a, b in parts[w] if layer >= 0} for w in (0, 1)]
    others = [[cols[w][a:b] for layer, _, a, b in parts[w] if layer < 0] for w in (0, 1)]
    passes = ("forward", "backward")
    for w, k in enumerate(TRACED):  # every layer once per pass, in order, each pass's stretches of one length
        order = [(layer, phase) for layer, phase, _, _ in parts[w] if layer >= 0]
        if order != [(i, ph) for ph in passes for i in _order(ph, k)]:
            raise NotRepeating("the layers do not run once per pass, in order")
        if len({(ph, len(x)) for (i, ph), x in layers[w].items() if 0 < i < k - 1}) != len(passes):
            raise NotRepeating("the middle layers of a pass run different operators")
    if len(others[0]) != len(others[1]):
        raise NotRepeating("the stretches outside the layers differ")
    more = depth - k_large

    def affine(x_small, x_large):  # the same rows at depth `depth`
        if x_small.shape != x_large.shape:
            raise NotRepeating("a stretch changes length with depth")
        return x_large + more * (x_large - x_small)

    def stretch(i: int, phase: str) -> np.ndarray:
        """Layer i's rows: the first and last layers as traced, a middle one as layer 1 plus (i − 1) steps of one
        layer index (layer 2 − layer 1 of the 4-layer trace)."""
        if i in (0, depth - 1):
            return affine(layers[0][(0 if i == 0 else k_small - 1, phase)], layers[1][(0 if i == 0 else k_large - 1, phase)])
        step = layers[1][(2, phase)] - layers[1][(1, phase)]
        return affine(layers[0][(1, phase)], layers[1][(1, phase)]) + (i - 1) * step

    out, other = [], 0
    for in_layer, phase in _runs(parts[1]):
        if in_layer:
            out.append(np.concatenate([stretch(i, phase) for i in _order(phase, depth)]))
        else:
            out.append(_grown(others[0][other], others[1][other], more))
            other += 1
    phases_all = [phase for x, (_, phase) in zip(out, _runs(parts[1])) for _ in range(len(x))]
    counts = ("params", "saved_layer_tensors", "hidden_sized_tensors", "mask_bytes")
    scalars = {k: int(large[k] + more * (large[k] - small[k])) for k in counts}
    rows, written = np.concatenate(out), large["shards_written"]
    rows, cost_cols = rows[:, :-width], rows[:, -width:]
    host, bands = rows[:, -2], rows[:, -1]
    return dict(scalars, rows=rows[:, :-2], host=host, bands=bands, costs=cost_cols, phases=phases_all, shards_written=written)


def _runs(stretches) -> list[tuple[bool, str]]:
    """The trace as runs of (inside the layers?, phase): one run per pass through the layers, one per stretch outside."""
    out = []
    for layer, phase, _, _ in stretches:
        if layer < 0 or not out or out[-1] != (True, phase):
            out.append((layer >= 0, phase))
    return out


def _order(phase: str, depth: int) -> range:
    return range(depth) if phase == "forward" else range(depth - 1, -1, -1)


def _grown(x_small: np.ndarray, x_large: np.ndarray, more: int) -> np.ndarray:
    """A stretch outside the layers at the full depth."""
    if x_small.shape == x_large.shape:
        return x_large + more * (x_large - x_small)
    block = len(x_large) - len(x_small)
    if block < 0 or len(x_large) < 2 * block:
        raise NotRepeating("a stretch shrinks with depth")
    repeats = np.r_[(x_large[block:] == x_large[:-block]).all(axis=1), False]  # row i is row i + block again
    best, start, run = 0, 0, 0
    for i, same in enumerate(repeats):
        run = run + 1 if same else 0
        if run > best:
            best, start = run, i - run + 1
    if best < block:
        raise NotRepeating("a stretch grows with depth by rows that do not repeat")
    x = np.delete(x_large, slice(start, start + block), axis=0)  # the small trace's rows, one block fewer
    x = x + more * (x - x_small)
    return np.insert(x, start, np.tile(x[start : start + block], (more + 1, 1)), axis=0)


def repeat_tiles(net, tracker) -> None:
    """Make every tiled MLP of `net` (fake tensors only) compute its first three and last shards, and write the others'
    rows into `tracker`: the middle shards have one shape, so they run the same operators and leave the same behind (in
    forward an output kept until the cat; in backward nothing past the next shard)."""
    import types

    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP

    from longctx.levers.tiled_mlp import default_shards

    def forward(mlp, x):
        shards = default_shards(x.shape[-2], x.shape[-1])
        return TiledMLP.apply(_Tiles(tracker, x.shape[-2], shards), mlp, x, shards, list(mlp.parameters()))

    tracker.shards_written = 0
    for layer in net.model.layers:
        layer.mlp.forward = types.MethodType(forward, layer.mlp)


class _Tiles:
    """The `fn` TiledMLP calls per shard, under no_grad in its forward, with grad in its backward: each pass apart."""

    def __init__(self, tracker, tokens: int, shards: int) -> None:
        size = -(-tokens // shards)  # torch.chunk's: shards of ceil(tokens / shards), the last one shorter
        self.tracker, self.last = tracker, -(-tokens // size) - 1
        self.starts = {False: [], True: []}  # per pass: each call's first row

    def __call__(self, module, part):
        starts = self.starts[grad := torch.is_grad_enabled()]
        if 4 <= (i := len(starts)) <= self.last:  # the shard before was skipped: write its rows
            self._write(starts, i - 1)
        starts.append(len(self.tracker.rows))
        if not 3 <= i < self.last:
            out = type(module).forward(module, part if grad else part.detach())  # as tile_mlp's compute
            self.like = (out.shape, out.dtype, out.device)
            return out
        # a computed output's size and category (made in the MLP's last projection, a module: an activation)
        with self.tracker.filing_as_activations():
            return part.clone() if grad else torch.empty(self.like[0], dtype=self.like[1], device=self.like[2])

    def _write(self, starts: list, i: int) -> None:
        """Replace shard i's rows (from starts[i] on) with shard 2's plus (i − 2) steps (shard 2 − shard 1)."""
        t, (a, b, c) = self.tracker, starts[1:4]
        if b - a != c - b:
            raise NotRepeating("two middle shards of a tiled MLP run different operators")
        for col in (t.rows, t.host_rows, t.band_rows, t.cost_rows):
            one, two = np.asarray(col[a:b]), np.asarray(col[b:c])
            del col[starts[i] :]
            col.extend((two + (i - 2) * (two - one)).tolist())
        for col in (t.phases, t.layer_rows or []):  # labels: shard 2's
            del col[starts[i] :]
            col.extend(col[b:c])
        t.shards_written += 1
