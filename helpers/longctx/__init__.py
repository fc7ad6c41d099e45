"""longctx: the helper library behind the long-context training lessons."""

from importlib.metadata import version

from longctx.errors import LongctxError

__version__ = "0.1.0"


def versions() -> dict:
    """The library versions a result was produced with (as installed), and the device it ran on."""
    libraries = {name: version(name) for name in ("torch", "transformers", "trl", "accelerate")}
    return {**libraries, "longctx": __version__, "device": device()}


def device() -> str:
    """The accelerator torch sees ("cuda"; "neuron" where torch-neuronx registers one), else "cpu"."""
    import torch

    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return acc.type if acc is not None else "cpu"


__all__ = ["LongctxError", "versions", "device", "__version__"]
