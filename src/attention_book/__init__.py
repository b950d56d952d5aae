"""attention_book: the reference implementation behind "Attention, from the ground up".

One module per idea, in chapter order:

=================  ====================================================  =======
module             what it holds                                         chapter
=================  ====================================================  =======
``attention``      softmax, scaled dot-product attention, masks          1
``key_value``      soft lookup, a single attention head with W_Q/W_K/W_V  2
``soft_hard``      hardmax, sparsemax, entropy, top-k                    3
``multihead``      split/merge heads, MultiHeadAttention                 4
``positional``     sinusoidal, learned and rotary position encodings     5
``transformer``    encoder/decoder layers and models, greedy decoding    6
``tasks``          seeded synthetic tasks (copy, reverse, sort, recall)  2-6
``training``       fit / evaluate with a progress bar                    2-7
``pretrained``     all-MiniLM-L6-v2 loaded into our Encoder (checksummed)  7
``datasets``       review snippets with seeded splits (checksummed)       7
``plotting``       attention heatmaps in one colour map                  all
``device``         which device to compute on                            all
=================  ====================================================  =======
"""

from .attention import attention_scores, causal_mask, padding_mask, scaled_dot_product_attention, softmax
from .device import available_devices, default_device
from .key_value import SingleHeadAttention, soft_lookup
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .plotting import ATTENTION_CMAP, plot_attention, plot_attention_grid
from .positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    rotate_half,
    sinusoidal_encoding,
)
from .soft_hard import entropy, hardmax, sparsemax, top_k_weights
from .tasks import BOS, EOS, PAD, AssociativeRecall, SequenceTask, Vocabulary
from .training import (
    History,
    classification_accuracy,
    classification_loss,
    evaluate,
    fit,
    seq2seq_exact_match,
    seq2seq_loss,
    set_seed,
)
from .transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderClassifier,
    EncoderDecoder,
    EncoderLayer,
    FeedForward,
    LanguageModel,
    greedy_decode,
)

__version__ = "0.1.0"

__all__ = [
    # chapter 1
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
    "EncoderDecoder",
    "EncoderClassifier",
    "LanguageModel",
    "greedy_decode",
    # tasks and training
    "PAD",
    "BOS",
    "EOS",
    "Vocabulary",
    "SequenceTask",
    "AssociativeRecall",
    "set_seed",
    "History",
    "fit",
    "evaluate",
    "seq2seq_loss",
    "seq2seq_exact_match",
    "classification_loss",
    "classification_accuracy",
    # devices and figures
    "default_device",
    "available_devices",
    "ATTENTION_CMAP",
    "plot_attention",
    "plot_attention_grid",
]
