"""Sequence lengths as people write them: 98304, 96k, 1M."""

from longctx.errors import LongctxError

MAX_TOKENS = 16 * 2**20  # tokens per estimated step: 16 times the guide's longest (1M takes ~10 s to estimate)


def parse_length(text: str) -> int:
    """'98304', '96k' (×1024) or '1M' (×1,048,576) → tokens."""
    text = text.strip()
    scale = {"k": 1024, "m": 1024**2}.get(text[-1:].lower(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:  # not a whole number (or more digits than Python reads)
        value = 0
    if value <= 0:
        shown = text if len(text) <= 40 else f"{text[:20]}… ({len(text)} characters)"
        raise LongctxError(f"Sequence length {shown!r} is not a positive integer (e.g. 98304, 96k or 1M).")
    return value
