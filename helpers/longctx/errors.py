"""One exception type for every refusal, so callers and tests can tell our checks from crashes."""


class LongctxError(ValueError):
    """Bad input, raised before any expensive work starts; the message names the fix."""


def check_choice(what: str, value, choices) -> None:
    """Refuse a value outside a fixed set, naming the set (the one spelling of "Unknown X; use one of …")."""
    if value not in choices:
        raise LongctxError(f"Unknown {what} {value!r}; use one of {', '.join(map(str, choices))}.")
