"""attention_book: the reference implementation behind "Attention, from the ground up".

The package is built in five floors; each imports only from the floors below it (a test,
``tests/book/test_layout.py``, checks this with ``ast``):

5. grading: ``grade`` (a class's notebooks graded by the exercises' checkers, run apart from the
   student's code; ``python -m attention_book.grade``), imported by no chapter;
4. tools: ``widgets`` (live attention views) and ``exercises`` (checkers);
3. analysis and presentation: ``analysis`` (measurements, formatting, the heatmap) and
   ``figures`` (one module per chapter, imported only by its chapter);
2. data and training: ``data`` (toy tasks, reviews, tagged tweets, word pieces, batches) and
   ``training`` (one ``fit``, losses and metrics, chapter 7's recipes);
1. model code, one module per idea, in chapter order (below);
0. foundations: ``_validation`` (input checks), ``_files`` (checksummed package files),
   ``modes`` (``evaluating``), ``device``.

=================  ======================================================  =======
module             what it holds                                           chapter
=================  ======================================================  =======
``rnn_encoder_``   a recurrent encoder-decoder: one vector or additive      1
``decoder``        attention over the encoder states (why attention)
``attention``      softmax, scaled dot-product attention, masks            1
``key_value``      soft lookup, a single head with W_Q/W_K/W_V             2
``recall``         a two-layer model that learns a key-value store         2
``soft_hard``      hardmax, sparsemax, entropy, top-k                      3
``multihead``      split/merge heads, MultiHeadAttention                   4
``positional``     sinusoidal, learned and rotary position encodings       5
``layers``         residual block, MLP, encoder/decoder layers, the stack  4-7
``transformer``    encoder, decoder, KV cache, the models built from them  4-7
``decoding``       greedy decoding, beam search, sequence scores           6
``pretrained``     all-MiniLM-L6-v2 loaded into our Encoder (checksummed)  7
``data``           toy tasks; reviews; tagged tweets; word pieces; batches  2, 4-7
``training``       fit/evaluate, losses and metrics, transfer recipes      2-7
``analysis``       cost, head and vector measurements; formatting; plots   1-7
``figures``        chapter-specific figures, one module per chapter        1-7
``widgets``        live views of attention (ipywidgets)                    1-7
``exercises``      the checkers behind ``check("N.M", answer)``            1-7
``grade``          grading a class's student notebooks (instructors)       1-7
``device``         which device to compute on                              all
=================  ======================================================  =======

What ``ab`` exports, and what a chapter imports by path. ``import attention_book as ab`` gives
the names of ``__all__`` below: the ideas that the chapters write out in a cell and then prove
equal to the package (attention and its masks, soft lookup, the heads, position encodings, the
layers and the Transformer models, greedy decoding), the toy tasks with their special tokens,
and what every chapter trains with (``fit``, the losses and metrics, ``set_seed``, the devices,
the attention heatmap): names a reader meets in several chapters or uses in code of their own.
Everything else is imported by path, ``from attention_book.<module> import name``, in the
section of the chapter that needs it, so that the import line says where the code lives:

* ``figures.chapterNN``, a chapter's own figures, imported by that chapter only; ``widgets`` and
  ``exercises`` (``check``, ``summary``);
* ``analysis.*``: measurements and formatting that a chapter reports but does not teach;
* what one chapter uses and no other: ``recall`` (2), ``positional``'s ``offset_rotation`` and
  ``sinusoidal_frequencies`` (5), ``data.dates``, ``data.numbers`` and ``decoding``'s beam search
  (6), and chapter 7's pretrained model, reviews, tweets and experiments (``pretrained``,
  ``data``, ``training.transfer``, ``training.masked_lm``, ``training.transfer_study``,
  ``training.study_results``, ``training.token_tagging``, ``training.entity_study``).

Bookkeeping (checksums, stored files' names, the commands that made them) stays out of the
chapters' opening cells; where a chapter shows provenance, a folded cell imports what it prints.
``tests/book/test_chapter_imports.py`` runs ruff's F401/F811 over every
chapter's code and keeps each chapter's opening import cell short.
"""

from .analysis.plotting import ATTENTION_CMAP, heatmap, plot_attention, plot_attention_grid
from .attention import attention_scores, causal_mask, padding_mask, scaled_dot_product_attention, softmax
from .data.numbers import CharacterCorpus
from .data.tasks import (
    BOS,
    EOS,
    IGNORE,
    PAD,
    AssociativeRecall,
    SequenceTask,
    ToyReviews,
    TwoRelationTask,
    Vocabulary,
    WordOrderTask,
)
from .decoding import greedy_decode
from .device import available_devices, default_device
from .key_value import SingleHeadAttention, soft_lookup
from .layers import DecoderLayer, EncoderLayer, FeedForward
from .modes import evaluating
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    rotate_half,
    sinusoidal_encoding,
)
from .rnn_encoder_decoder import AdditiveScore, RNNEncoderDecoder
from .soft_hard import entropy, hardmax, sparsemax, top_k_weights
from .training import (
    History,
    StoredRuns,
    classification_accuracy,
    classification_loss,
    evaluate,
    fit,
    masked_token_loss,
    seq2seq_exact_match,
    seq2seq_loss,
    seq2seq_token_accuracy,
    set_seed,
    token_accuracy,
    token_loss,
)
from .transformer import (
    Decoder,
    DecoderCache,
    Encoder,
    EncoderClassifier,
    EncoderDecoder,
    LanguageModel,
    TokenClassifier,
    mean_pool,
)

__version__ = "0.1.0"

__all__ = [
    # chapter 1
    "AdditiveScore",
    "RNNEncoderDecoder",
    "softmax",
    "attention_scores",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    # chapter 2
    "soft_lookup",
    "SingleHeadAttention",
    # chapter 3
    "hardmax",
    "sparsemax",
    "entropy",
    "top_k_weights",
    # chapter 4
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
    # chapter 5
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "rotate_half",
    "apply_rotary",
    # chapter 6
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "DecoderCache",
    "EncoderDecoder",
    "EncoderClassifier",
    "TokenClassifier",
    "LanguageModel",
    "greedy_decode",
    "mean_pool",
    # tasks
    "PAD",
    "BOS",
    "EOS",
    "IGNORE",
    "Vocabulary",
    "SequenceTask",
    "AssociativeRecall",
    "TwoRelationTask",
    "WordOrderTask",
    "ToyReviews",
    "CharacterCorpus",
    # training
    "set_seed",
    "StoredRuns",
    "evaluating",
    "History",
    "fit",
    "evaluate",
    "classification_loss",
    "classification_accuracy",
    "token_loss",
    "token_accuracy",
    "masked_token_loss",
    "seq2seq_loss",
    "seq2seq_exact_match",
    "seq2seq_token_accuracy",
    # devices and figures
    "default_device",
    "available_devices",
    "ATTENTION_CMAP",
    "heatmap",
    "plot_attention",
    "plot_attention_grid",
]
