"""Where training memory goes before activations: weights, gradients, optimizer state. The fine-tuning primer's
arithmetic, checked byte for byte against a measured step: AdamW keeps two moment tensors per trainable element and one
scalar `step` tensor per trainable parameter tensor (which matters for an exact match on a tiny model, not on a 7B one)."""

from dataclasses import asdict, dataclass

from longctx.errors import LongctxError, check_choice

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "nf4": 0.5}
METHODS = ("full", "lora", "qlora")
GB = 1e9  # the primer quotes decimal gigabytes


@dataclass(frozen=True)
class Budget:
    method: str
    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer

    def as_dict(self, unit: float = 1.0) -> dict:
        d = {k: v / unit if isinstance(v, (int, float)) else v for k, v in asdict(self).items()}
        d["total"] = self.total / unit
        return d


def training_budget(
    n_params: float,
    method: str = "full",
    *,
    weight_dtype: str = "bf16",
    state_dtype: str = "fp32",
    trainable_params: float = 0,
    trainable_tensors: int = 0,
    adapter_dtype: str | None = None,
) -> Budget:
    """Bytes for weights, gradients and AdamW state, before any activation. full: every weight is trained, its gradients in its
    dtype. lora: the base weights are frozen (no gradient, no optimizer state);
    `trainable_params` adapter weights in `adapter_dtype` (default: the weight dtype) carry gradients and AdamW state.
    qlora: as lora, with the frozen base stored in 4 bits (`weight_dtype="nf4"`)."""
    check_choice("method", method, METHODS)
    dtypes = dict(weight_dtype=weight_dtype, state_dtype=state_dtype, adapter_dtype=adapter_dtype)
    for name, dt in dtypes.items():
        if dt is not None:
            check_choice(name, dt, BYTES)
    if method == "qlora" and weight_dtype != "nf4":
        raise LongctxError("QLoRA stores the base in 4 bits: pass weight_dtype='nf4' (or method='lora').")
    if method != "full" and trainable_params <= 0:
        raise LongctxError(f"method={method!r} needs trainable_params (the adapter's parameter count) > 0.")
    if method == "full":  # every weight trained, in its own dtype
        trained, frozen, dtype = n_params, 0, weight_dtype
    else:  # the adapters (bf16 beside a 4-bit base) trained, the base frozen
        trained, frozen = trainable_params, n_params
        dtype = adapter_dtype or ("bf16" if weight_dtype == "nf4" else weight_dtype)
    optimizer = trained * 2 * BYTES[state_dtype] + trainable_tensors * BYTES["fp32"]  # gradients: the trained dtype
    return Budget(method, frozen * BYTES[weight_dtype] + trained * BYTES[dtype], trained * BYTES[dtype], optimizer)
