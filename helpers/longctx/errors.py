"""One exception type for every refusal, so callers and tests can tell our checks from crashes."""


class LongctxError(ValueError):
    """Bad input, raised before any expensive work starts; the message names the fix."""
