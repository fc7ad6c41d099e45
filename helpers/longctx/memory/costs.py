"""What each operator of a traced step asks of the hardware, counted as the tracker records it (one row per operator,
beside its memory row): the FLOPs of its matrix products by kind (a linear layer's, or attention's, forward or backward
and by kernel, a causal mask counting half, as the kernels skip the masked blocks), the bytes an elementwise operator
reads and writes, the bytes it copies between device and host (activation offload), and the bytes a collective moves
over this rank's link (FSDP's weight all-gathers and gradient reduce-scatters, context parallelism's key/value
exchange)."""

import contextlib
import functools

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

# host_memory_bytes: what an operator on host tensors reads and writes (an offloaded optimizer's step, run by the
# host's CPU: memory/timing.py prices it at CPU Adam's throughput instead)
COLUMNS = ("linear_flops", "attention_flops", "memory_bytes", "host_bytes", "comm_bytes", "comm", "recompute")
COLUMNS += ("host_memory_bytes", "attention_backward_flops", "kernel")
HOST = "meta"  # the estimate's host memory: on fake tensors a fake 'cuda' cannot run backward on a CPU build
COL = {name: i for i, name in enumerate(COLUMNS)}
# the `comm` column: what a collective is and how it overlaps (timing.py's rule)
CP_GATHER, CP_RING, WAIT, FSDP_GATHER, FSDP_REDUCE, OTHER_COLLECTIVE, ALL_TO_ALL = 1, 2, 3, 4, 5, 6, 7
COMM_NAMES = {CP_GATHER: "cp all-gather", CP_RING: "cp ring", FSDP_GATHER: "fsdp all-gather", FSDP_REDUCE: "fsdp reduce-scatter"}
COMM_NAMES |= {OTHER_COLLECTIVE: "other collective", ALL_TO_ALL: "ulysses all-to-all"}
# the `kernel` column: which attention kernel ran an attention row (memory/kernels.py prices each): whatever SDPA picks
# on the card, SDPA's memory-efficient backend (taken with a mask), the flash-attn package, eager's batched products
SDPA, SDPA_EFFICIENT, FLASH_ATTN, EAGER = 1, 2, 3, 4

_aten = torch.ops.aten
# torch 2.13's flop registry lacks the CPU flash kernel (a context-parallel trace runs it); its arguments are the CUDA
# flash kernel's: (query, key, value, ...) and (grad_out, query, key, value, ...)
_CPU_FLASH = {
    _aten._scaled_dot_product_flash_attention_for_cpu: lambda a: sdpa_flop_count(*(t.shape for t in a[:3])),
    _aten._scaled_dot_product_flash_attention_for_cpu_backward: lambda a: sdpa_backward_flop_count(*(t.shape for t in a[:4])),
}
_BATCHED = {_aten.bmm, _aten.baddbmm}  # eager attention's scores and weighted values (under an attention module)
_FREE = ("empty", "empty_like", "new_empty", "empty_strided", "detach", "alias", "lift_fresh", "device")  # no data moved
_state = {"pending": [0, 0, 0], "kernel": 0, "all_to_all": 0, "times": 1}  # charges for the next operator; how often
# the current one counts


def charge(linear: int = 0, attention: int = 0, *, backward: bool = False, kernel: int = 0, all_to_all: int = 0) -> None:
    """What a stand-in only allocates for, added to the next operator the tracker records: FLOPs (attention's by
    `kernel`, forward or `backward`), or the bytes an all-to-all brings this rank (Ulysses')."""
    _state["pending"][0] += linear
    _state["pending"][2 if backward else 1] += attention
    _state["kernel"] = kernel or _state["kernel"]
    _state["all_to_all"] += all_to_all


def causal_attention_flops(q_shape, k_shape, *, backward: bool, causal: bool = True) -> int:
    """torch's count for one SDPA call (forward: two products; backward: five, the scores recomputed), half with a
    causal mask. Shapes (batch, heads, seq, head_dim); grouped K/V heads count as the query's."""
    b, h, s, d = q_shape
    k_shape = (b, h, k_shape[2], d)
    if backward:
        flops = sdpa_backward_flop_count(q_shape, q_shape, k_shape, k_shape)
    else:
        flops = sdpa_flop_count(q_shape, k_shape, k_shape)
    return flops // 2 if causal else flops


@contextlib.contextmanager
def repeated(times: int):
    """Operators inside count `times` times (a loop the estimator runs once for iterations that do the same work)."""
    before = _state["times"]
    _state["times"] = before * times
    try:
        yield
    finally:
        _state["times"] = before


def reset() -> None:
    _state.update(pending=[0, 0, 0], kernel=0, all_to_all=0, times=1)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _arg(func, args, kwargs, name: str, default=None):
    """An argument of `func` by its schema name."""
    if name in kwargs:
        return kwargs[name]
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            return args[i] if i < len(args) else default
    return default


@functools.cache
def _kind(func) -> tuple:
    """What of_op needs to know of an operator, once per operator: (how it is costed, its name, the positions of the
    arguments it writes in place)."""
    namespace, packet, name = func.namespace, func._overloadpacket, func._schema.name.split("::")[-1]
    written = tuple(i for i, a in enumerate(func._schema.arguments) if a.alias_info and a.alias_info.is_write)
    if namespace in ("_c10d_functional", "c10d"):
        return "collective", name, written
    if packet in _CPU_FLASH or packet in flop_registry and "attention" in name:  # SDPA's, flash's, cuDNN's kernels
        return "attention", name, written
    if packet in flop_registry:
        return "batched" if packet in _BATCHED else "product", name, written
    if name in ("_to_copy", "copy_"):
        return "copy", name, written
    free = func.is_view or name.startswith(_FREE) or name.endswith(("_like", "empty"))
    return ("free" if free else "memory"), name, written


def _tensors(values) -> list:
    """The tensors among `values`, lists looked into (an operator's tensor-list arguments)."""
    return [t for t in tree_leaves(list(values)) if isinstance(t, torch.Tensor)]


def of_op(func, args, kwargs, out, *, attention_module, recompute: bool) -> list[int]:
    """The COLUMNS of one dispatched operator (`attention_module()`: whether it runs inside an attention module)."""
    row = [0] * len(COLUMNS)
    row[COL["recompute"]] = int(recompute)
    kind, name, written = _kind(func)
    if kind != "free":
        ins = _tensors((*args, *kwargs.values()))
        outs = _tensors(out if isinstance(out, (list, tuple)) else (out,))
    if kind == "collective":
        _collective(row, func, name, args, kwargs, ins, outs, functional=func.namespace == "_c10d_functional")
    elif kind == "attention":
        packet = func._overloadpacket
        flops = _CPU_FLASH[packet](args) if packet in _CPU_FLASH else flop_registry[packet](*args, **kwargs, out_val=out)
        flops = flops // 2 if _arg(func, args, kwargs, "is_causal", False) else flops
        row[COL["attention_backward_flops" if name.endswith("_backward") else "attention_flops"]] = flops
        # the efficient kernel is what SDPA takes with a mask; the ring's CPU kernel stands for SDPA's own choice
        row[COL["kernel"]] = SDPA_EFFICIENT if "efficient" in name else SDPA
    elif kind in ("product", "batched"):
        flops = flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
        if kind == "batched" and attention_module():  # eager attention's scores and weighted values
            row[COL["attention_flops"]], row[COL["kernel"]] = flops, EAGER
        else:
            row[COL["linear_flops"]] = flops
    elif kind == "copy" and outs and len({t.device for t in ins + outs}) > 1:
        row[COL["host_bytes"]] = _nbytes(outs[0])  # offload's copy out to the host, or back (a weight fetched)
    elif kind in ("memory", "copy"):
        returned = {id(t) for t in outs}  # an in-place operator that returns what it wrote counts it once as output
        mutated = _tensors(args[i] for i in written if i < len(args))
        on_host = all(t.device.type == HOST for t in ins + outs)
        row[COL["host_memory_bytes" if on_host else "memory_bytes"]] = (
            sum(map(_nbytes, ins)) + sum(map(_nbytes, outs)) + sum(_nbytes(t) for t in mutated if id(t) not in returned)
        )
    pending, times = _state["pending"], _state["times"]
    if any(pending) or times != 1:
        for col, extra in zip(("linear_flops", "attention_flops", "attention_backward_flops"), pending):
            row[COL[col]] = (row[COL[col]] + extra) * times
        for col in ("memory_bytes", "host_bytes", "comm_bytes"):
            row[COL[col]] *= times
        if any(pending[1:]):
            row[COL["kernel"]] = _state["kernel"]
        _state.update(pending=[0, 0, 0], kernel=0)
    if _state["all_to_all"]:
        row[COL["comm"]], row[COL["comm_bytes"]] = ALL_TO_ALL, _state["all_to_all"] * times
        _state["all_to_all"] = 0
    return row


def _collective(row, func, name, args, kwargs, ins, outs, *, functional: bool) -> None:
    """Bytes over this rank's link: an all-gather receives all but its own share (output − input), a reduce-scatter
    sends all but its own (input − output), a permutation sends what goes to other ranks, an all-reduce twice what
    it keeps of the others'."""
    given_in, given_out = _arg(func, args, kwargs, "input_tensor"), _arg(func, args, kwargs, "output_tensor")
    if given_out is not None:  # c10d's in-place collectives take their output as an argument (FSDP2's)
        ins, outs = _tensors([given_in]), tree_leaves(given_out)
    size_in, size_out = sum(map(_nbytes, ins)), sum(map(_nbytes, outs))
    if name == "wait_tensor":
        row[COL["comm"]] = WAIT
        return
    if "gather" in name:
        kind, moved = (CP_GATHER if functional else FSDP_GATHER), size_out - size_in
    elif "reduce_scatter" in name:
        kind, moved = (OTHER_COLLECTIVE if functional else FSDP_REDUCE), size_in - size_out
    elif name == "all_to_all_single":
        splits = _arg(func, args, kwargs, "input_split_sizes")
        own = splits[0] / max(sum(splits), 1) if splits else 0.0  # the trace is rank 0's
        # the ring's functional rotation, or Ulysses' c10d exchange before and after attention (DeepSpeed's
        # _DimZeroAllToAll), which the next operator waits for
        kind, moved = (CP_RING if functional else ALL_TO_ALL), int(size_in * (1 - own))
    else:  # all_reduce and the rest: an upper bound
        kind, moved = OTHER_COLLECTIVE, 2 * size_in
    row[COL["comm"]], row[COL["comm_bytes"]] = kind, max(moved, 0)
