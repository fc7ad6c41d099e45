"""One exception type for every refusal, so callers and tests can tell our checks from crashes."""


class LongctxError(ValueError):
    """A failure the user can act on, its message naming the fix: bad input, refused before any expensive work where the
    cause can be known then, or a run's outcome found wrong afterwards."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook (JupyterLab, papermill): the message, not the frames
        return [f"{type(self).__name__}: {self}"]


SEED_LIMIT = 2**32  # numpy's RandomState and transformers' set_seed take 0 .. 2**32 - 1


def check_positive_int(name: str, value) -> int:
    """A whole number above zero (numpy's too, not a bool), returned as an int."""
    whole = not isinstance(value, bool) and (isinstance(value, int) or type(value).__name__.startswith(("int", "uint")))
    if not whole or value <= 0:
        raise LongctxError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def is_power_of_two(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and not value & (value - 1)


def check_choice(what: str, value, choices) -> None:
    """Refuse a value outside a fixed set, naming the set (the one spelling of "Unknown X; use one of …")."""
    if value not in choices:
        raise LongctxError(f"Unknown {what} {value!r}; use one of {', '.join(map(str, choices))}.")
