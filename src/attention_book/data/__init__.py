"""Floor 2, data: every toy task, the review snippets, tagged tweets, word pieces and length-sorted batches.

========================  ===================================================  =======
module                    what it holds                                        chapter
========================  ===================================================  =======
``data.tasks``            the toy tasks, PAD/BOS/EOS/IGNORE, word-level ids    2, 4-6
``data.numbers``          number names: a character corpus, sampled lines      6
``data.dates``            dates as people write them, to translate to ISO      6
``data.reviews``          Rotten Tomatoes snippets with seeded splits          7
``data.entities``         WNUT-16 tweets tagged with named entities, tags      7
                          aligned to word pieces, entity-level F1
``data.pieces``           word-piece vocabulary and BERT's masking             7
``data.batches``          batches of similar length, padding trimmed           7
========================  ===================================================  =======

Imports only floors 0 and 1 (model code), never analysis, figures, widgets or exercises.
"""

from .batches import LengthBatches, index_batches, trim_padding
from .dates import DATE_FORMATS, DateTask, field_spans, read_date, write_date
from .numbers import CharacterCorpus, is_number_name, number_words, sample_lines
from .pieces import MASK, SPECIAL_PIECES, UNK, PieceVocabulary, build_vocabulary, mask_tokens
from .reviews import LABEL_NAMES, Reviews, TextSplit, load_reviews
from .tasks import (
    BOS,
    EOS,
    IGNORE,
    PAD,
    SPECIALS,
    AssociativeRecall,
    SequenceTask,
    ToyReviews,
    TwoRelationTask,
    Vocabulary,
    WordOrderTask,
    word_encoder,
)

__all__ = [
    "DATE_FORMATS",
    "DateTask",
    "field_spans",
    "read_date",
    "write_date",
    "LengthBatches",
    "index_batches",
    "trim_padding",
    "MASK",
    "SPECIAL_PIECES",
    "UNK",
    "PieceVocabulary",
    "build_vocabulary",
    "mask_tokens",
    "LABEL_NAMES",
    "Reviews",
    "TextSplit",
    "load_reviews",
    "BOS",
    "EOS",
    "IGNORE",
    "PAD",
    "SPECIALS",
    "AssociativeRecall",
    "CharacterCorpus",
    "SequenceTask",
    "ToyReviews",
    "TwoRelationTask",
    "Vocabulary",
    "WordOrderTask",
    "is_number_name",
    "number_words",
    "sample_lines",
    "word_encoder",
]
