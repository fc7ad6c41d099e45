import hashlib

import pytest

from longctx import LongctxError, data


def test_corpus_has_no_folio_copies_or_duplicates():
    books = data.books("train") + data.books("validation")
    assert not any(b.name.endswith("_f") for b in books)
    digests = [hashlib.sha256(b.text.encode()).hexdigest() for b in books]
    assert len(set(digests)) == len(digests)
    assert any(b.name.startswith("milton__") for b in books)


def test_splits_hold_out_whole_books():
    train = {b.name for b in data.books("train")}
    val = {b.name for b in data.books("validation")}
    assert train and val and not train & val


def test_long_sequences_have_exact_length_even_past_the_corpus():
    total = len(data.token_stream("validation"))
    ds = data.long_sequences(total + 100, 2, split="validation")
    assert [len(r) for r in ds["input_ids"]] == [total + 100] * 2


def test_tokenizer_round_trips():
    tok = data.tokenizer()
    text = "To be, or not to be, that is the question"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok) == data.VOCAB_SIZE


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(seq_len=0, n=1), "seq_len must be a positive integer"),
    (dict(seq_len=12.5, n=1), "seq_len must be a positive integer"),
    (dict(seq_len=8, n=1, split="test"), "Unknown split"),
    (dict(seq_len=8, n=1, dataset="c4"), "Unknown dataset"),
    (dict(seq_len=8, n=1, dataset="pg19"), "needs the model's tokenizer"),
    (dict(seq_len=8, n=1, dataset="pg19", split="dev", tokenizer=object()), "Unknown split"),
])
def test_bad_arguments_are_refused(kwargs, fragment):
    with pytest.raises(LongctxError, match=fragment):
        data.long_sequences(**kwargs)
