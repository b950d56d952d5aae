"""attention_book.data.dates (chapter 6): dates as people write them, translated to ISO 8601.

The task is seeded (the same seed, the same examples), its splits hold disjoint dates, and
every format is a function of the date that reads back to it: the translation is well defined.
"""

import datetime

import pytest
import torch
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.data.dates import (
    DATE_FORMATS,
    FIRST_DATE,
    LAST_DATE,
    SPLITS,
    DateTask,
    read_date,
    split_dates,
    write_date,
)

EVERY_DATE = [FIRST_DATE + datetime.timedelta(days=i) for i in range((LAST_DATE - FIRST_DATE).days + 1)]


def test_the_examples_people_write_mean_the_same_iso_date():
    march_third = datetime.date(1998, 3, 3)
    assert write_date(march_third, "en-GB spoken") == "tuesday 3rd of march 1998"
    assert write_date(march_third, "en-US numeric") == "3/3/98"
    assert write_date(march_third, "en-US long") == "March 3, 1998"
    assert write_date(march_third, "de-DE long") == "3. März 1998"
    assert write_date(march_third, "fr-FR long") == "mardi 3 mars 1998"
    assert write_date(march_third, "es-ES long") == "3 de marzo de 1998"
    for text in ("tuesday 3rd of march 1998", "3/3/98", "March 3, 1998", "03.03.98", "3 Mar 1998"):
        assert read_date(text).isoformat() == "1998-03-03"


@pytest.mark.parametrize("format_name", list(DATE_FORMATS))
def test_every_format_reads_back_to_its_date_over_the_whole_range(format_name):
    for date in EVERY_DATE:
        assert read_date(write_date(date, format_name)) == date, (format_name, date)


def test_weekdays_and_ordinals_are_right():
    assert write_date(datetime.date(2000, 1, 1), "en-US weekday") == "Saturday, January 1, 2000"
    ordinals = [
        write_date(datetime.date(2001, 1, day), "en-GB ordinal").split()[0]
        for day in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)
    ]
    assert ordinals == ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]
    assert read_date("1/1/49") == datetime.date(2049, 1, 1) and read_date("1/1/50") == datetime.date(1950, 1, 1)


def test_splits_are_disjoint_cover_the_range_and_never_change():
    splits = {name: split_dates(name) for name in SPLITS}
    sets = {name: set(dates) for name, dates in splits.items()}
    assert not sets["train"] & sets["validation"] and not sets["train"] & sets["test"]
    assert not sets["validation"] & sets["test"]
    assert set().union(*sets.values()) == set(EVERY_DATE)
    assert abs(len(sets["test"]) / len(EVERY_DATE) - SPLITS["test"]) < 0.001
    assert split_dates("test") == splits["test"]


def test_a_task_draws_only_dates_of_its_split():
    for split in SPLITS:
        task = DateTask(300, split=split, seed=5)
        assert set(task.dates) <= set(split_dates(split))


def test_tasks_are_deterministic_per_seed_and_differ_between_seeds():
    first, again, other = DateTask(200, seed=1), DateTask(200, seed=1), DateTask(200, seed=2)
    assert first.texts == again.texts and torch.equal(first.source, again.source)
    assert first.texts != other.texts
    assert set(first.format_names) == set(DATE_FORMATS)  # 200 draws reach every one of the 11 formats


def test_items_are_the_sequence_task_layout_and_decode_to_text_and_iso():
    task = DateTask(64, split="validation", seed=0)
    item = task[3]
    assert "".join(task.vocab.decode(item["source"])) == task.texts[3]
    assert "".join(task.vocab.decode(item["target_out"])) == task.dates[3].isoformat()
    assert item["target_in"][0] == ab.BOS and item["target_out"][-1] == ab.EOS
    assert int(item["source_padding"].sum()) == len(task.texts[3])
    assert torch.equal(item["target_in"][1:], item["target_out"][:-1])
    batch = next(iter(DataLoader(task, batch_size=16)))
    assert batch["source"].shape == (16, task.max_len) and batch["target_out"].shape == (16, 11)
    model = ab.EncoderDecoder(
        len(task.vocab), len(task.vocab), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=32
    )
    assert ab.seq2seq_loss(model, batch).item() > 0
    assert torch.equal(task.encode(task.texts[3])[0], item["source"][: len(task.texts[3])])


def test_bad_input_raises_a_clear_error():
    with pytest.raises(ValueError, match="format_name must be one of"):
        write_date(datetime.date(1998, 3, 3), "xx-XX")
    with pytest.raises(ValueError, match="between 1950-01-01 and 2049-12-31"):
        write_date(datetime.date(1949, 12, 31), "en-US long")
    with pytest.raises(ValueError, match="not a date in any of the formats"):
        read_date("the third of March")
    with pytest.raises(ValueError, match="split must be one of"):
        DateTask(10, split="dev")
    with pytest.raises(ValueError, match="formats must be names"):
        DateTask(10, formats=("klingon",))
    with pytest.raises(ValueError, match="shorter than the longest date"):
        DateTask(10, max_len=8)
    with pytest.raises(ValueError, match="at most 32 characters"):
        DateTask(1).encode("x" * 40)
