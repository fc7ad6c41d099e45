"""Neuron (AWS Trainium) specifics the lessons need without a Neuron device: which core sets the runtime accepts, and
which torch.compile backend a device compiles with."""

from longctx.errors import LongctxError

# The guide: NEURON_RT_VISIBLE_CORES accepts these subsets of a trn2.3xlarge's 4 logical cores; other
# pairs (e.g. 1,2) fail when the Neuron runtime sets up collectives across them.
NEURON_CORE_SETS = ("0", "1", "2", "3", "0,1", "2,3", "0-3")


def check_neuron_cores(value: str | None) -> str | None:
    """Refuse NEURON_RT_VISIBLE_CORES values the guide says the Neuron runtime cannot use."""
    cleaned = None if value is None else value.replace(" ", "")
    if cleaned not in (None, *NEURON_CORE_SETS):
        raise LongctxError(
            f"NEURON_RT_VISIBLE_CORES={value!r} is not a core set the Neuron runtime supports for "
            f"collectives; use one core or one of 0,1 / 2,3 / 0-3."
        )
    return cleaned


def default_backend(device_type: str):
    """torch.compile's backend on `device_type`: None on Neuron (TRL/transformers pick Neuron's, as the guide does)."""
    return None if device_type == "neuron" else "inductor"
