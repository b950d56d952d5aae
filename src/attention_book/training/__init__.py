"""Floor 2, training: the one loop, the losses and metrics, and chapter 7's transfer-learning recipes.

=====================  =========================================================  =======
module                 what it holds                                              chapter
=====================  =========================================================  =======
``training.loop``      ``fit`` (hooks, one ``History`` record), ``evaluate``,      2-7
                       ``set_seed``, ``evaluating``
``training.losses``    classification, per-token, masked-token and seq2seq        2, 4-7
                       losses with their metrics
``training.transfer``  from scratch, MLM pretraining, features, linear probe,      7
                       fine-tuning the top layers, early stopping (``KeepBest``)
``training.masked_``   scoring a masked language model: accuracy at [MASK], the    7
``lm``                 pieces it puts in a gap
``.transfer_study``    the transfer study: those recipes at every label count,    7
                       every choice made on validation
``training.study_``    the study's intervals, its stored run (load, store) and    7
``results``            the fingerprint of the code that made it
``training.token_``    taggers (a tag per word) from MiniLM or from scratch,      7
``tagging``            trained alike; predictions read back per word
``training.entity_``   the named-entity study: fine-tuned against from scratch,   7
``study``              seeds 0-4, its stored run and its fingerprint
``training.stored_``   ``StoredRuns``: a chapter's extra seeds, trained here or     4, 6
``runs``               loaded from what ``make seeds`` stored in the package
=====================  =========================================================  =======

Imports floors 0-2 only (model code and data), never analysis, figures, widgets or exercises.
"""

from .loop import History, evaluate, evaluating, fit, move_batch, set_seed
from .losses import (
    classification_accuracy,
    classification_loss,
    masked_token_loss,
    seq2seq_exact_match,
    seq2seq_loss,
    seq2seq_token_accuracy,
    token_accuracy,
    token_loss,
)
from .stored_runs import SEEDS_VARIABLE, StoredRuns

__all__ = [
    "History",
    "StoredRuns",
    "SEEDS_VARIABLE",
    "fit",
    "evaluate",
    "evaluating",
    "move_batch",
    "set_seed",
    "classification_loss",
    "classification_accuracy",
    "token_loss",
    "token_accuracy",
    "masked_token_loss",
    "seq2seq_loss",
    "seq2seq_exact_match",
    "seq2seq_token_accuracy",
]
