"""Chapter 1's widget: pick a query token and watch its scores, weights and output.

A short sentence of tokens, each a vector (given, or drawn from a seeded generator).
Self-attention with ``Q = K = V = X``: the chosen token's query is compared with
every token's key, the scores go through a softmax, and the output is the weighted
average of the token vectors, ``h = sum_j a_j x_j``.

Controls: the query token (dropdown), the temperature (slider), whether the scores are
divided by sqrt(d_k), whether attention is causal (looks back only), and the sentence
itself (a text box: reorder or repeat the tokens, or, with drawn vectors, type new words).

The kernel computes, with torch, every query's scores, weights and output for every
temperature stop, with and without the scale and the causal mask; the browser draws the
chosen query's weights as bars (each bar's scaled score s_j/tau written above it), the
whole attention matrix with that query's row outlined, and the output vector. Only a new
sentence goes back to the kernel. On the book's website (no kernel) js/01_attention.js computes a
new sentence itself (attentionData, mirroring :meth:`AttentionExplorer.compute` and
:func:`drawn_vector`; tests/widgets/test_static_math.py holds the two together): for that
``data`` also carries the given vectors (``vocabulary``), or, with drawn vectors, the seed.

Its drawing, its page computation and its view rule are in ``js/01_attention.js``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..attention import attention_scores, causal_mask, softmax
from ._base import AttentionWidget, WidgetInputError, rounded

__all__ = ["AttentionExplorer", "DEFAULT_SENTENCE", "MAX_TOKENS", "MAX_FEATURES", "TEMPERATURES"]

DEFAULT_SENTENCE = "the cat sat on the mat"
MAX_TOKENS = 10
MAX_FEATURES = 8
# The temperature slider's stops: 10 ** (-1 ... 1) in 21 steps (1.0 is one of them).
TEMPERATURES = tuple(round(10 ** (k / 10), 4) for k in range(-10, 11))


# -- drawn vectors ------------------------------------------------------------------------
# A word without a given vector gets numbers from a small generator written twice, here and
# in js/01_attention.js (drawnVector), with the same integer and float64 steps, so that the book's
# website (no kernel, no torch) draws the same vectors bit for bit:
#   1. the word's UTF-8 bytes are hashed to 32 bits (FNV-1a), the seed reduced to 32 bits
#      (seed mod 2**32) and mixed in: key = mix32(hash + mix32(seed)) mod 2**32;
#   2. splitmix32 counts from the key: its n-th number (n = 1, 2, ...) is
#      mix32(key + n * 0x9E3779B9 mod 2**32), where mix32 is MurmurHash3's 32-bit finaliser;
#   3. each number u becomes a uniform (u + 0.5) / 2**31 - 1 in (-1, 1), exactly;
#   4. pairs of uniforms (a, b) with 0 < s = a*a + b*b < 1 give two standard normal numbers
#      a * f and b * f, f = sqrt(-2 ln(s) / s) (Marsaglia's polar method; other pairs are
#      skipped), ln written out with + - * / only (_natural_log), because Python's and a
#      browser's math libraries may differ in the last bit where sqrt and division may not;
#   5. the first ``dim`` normals, rounded to float32 (the widget's dtype).
_MASK32 = 0xFFFFFFFF
_GOLDEN32 = 0x9E3779B9
_LN2 = 0.6931471805599453
_SQRT2 = 1.4142135623730951


def _mix32(x: int) -> int:
    """MurmurHash3's finaliser: a 32-bit integer whose every bit depends on every bit of ``x``."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & _MASK32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)


def _fnv1a(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & _MASK32
    return h


def _natural_log(x: float) -> float:
    """ln(x) for 0 < x < 1 with + - * / only: x = m * 2**e, ln m by the series of atanh."""
    exponent = 0
    while x < 1.0:
        x *= 2.0  # exact
        exponent -= 1
    if x > _SQRT2:  # m in [sqrt(1/2), sqrt(2)]: the series below converges fast
        x /= 2.0
        exponent += 1
    t = (x - 1.0) / (x + 1.0)  # |t| <= 0.172; ln m = 2 (t + t^3/3 + t^5/5 + ...)
    t2 = t * t
    term, total = t, 0.0
    for k in range(1, 30, 2):  # 15 terms: the next is below 1e-24
        total += term / k
        term *= t2
    return 2.0 * total + exponent * _LN2


def drawn_vector(word: str, seed: int, dim: int) -> torch.Tensor:
    """The vector a word gets when none is given: ``dim`` standard normal numbers (float32)
    that depend only on the word, the seed and ``dim`` (the generator described above,
    the same in js/01_attention.js, so the website draws the same numbers)."""
    state = (_fnv1a(word.encode("utf-8")) + _mix32(seed & _MASK32)) & _MASK32
    key = _mix32(state)
    counter = 0
    normals: list[float] = []
    while len(normals) < dim:
        pair = []
        for _ in range(2):
            counter += 1
            bits = _mix32((key + counter * _GOLDEN32) & _MASK32)
            pair.append((bits + 0.5) / 2147483648.0 - 1.0)  # (-1, 1)
        a, b = pair
        s = a * a + b * b
        if 0.0 < s < 1.0:
            factor = math.sqrt(-2.0 * _natural_log(s) / s)
            normals += [a * factor, b * factor]
    return torch.tensor(normals[:dim], dtype=torch.float32)


class AttentionExplorer(AttentionWidget):
    """Choose a query token; see its scores, softmax weights and the mixed output vector.

    Args:
        tokens: the sentence, a list of words or one string split on spaces
            (default: ``"the cat sat on the mat"``, or ``x1, x2, ...`` when only vectors are given).
        vectors: (T, d) tensor or nested list, one vector per token; a word that occurs
            twice must have the same vector both times. If None, every distinct word gets
            a vector of ``dim`` numbers drawn from a generator seeded by ``seed`` and the word.
        seed: seed for drawn vectors.
        device: where attention runs ("cpu", "cuda", ...; default: the book's default device).
        dim: size of drawn vectors (1 to 8); ignored when ``vectors`` are given.
        query: index of the starting query token (default: the last token).

    Raises ValueError for bad arguments (e.g. 3 tokens but 4 vectors). Bad text typed into
    the sentence box later (empty, too long, an unknown word) is shown in the widget.

    ``data`` holds ``tokens``, ``temperatures`` and ``weights``, ``scores`` (None where
    masked) and ``outputs`` indexed [scaled][causal][temperature][query]; ``view`` holds
    ``query``, ``temperature`` (an index into ``temperatures``), ``scaled`` and ``causal``;
    :meth:`shown` reads out what the picture shows.
    """

    def __init__(
        self,
        tokens: Sequence[str] | str | None = None,
        vectors=None,
        seed: int = 0,
        device: str | torch.device | None = None,
        dim: int = 4,
        query: int | None = None,
    ):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, but {seed!r} was given")
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_FEATURES:
            raise ValueError(f"dim must be an integer from 1 to {MAX_FEATURES}, but {dim!r} was given")
        if vectors is not None:
            try:
                vectors = torch.as_tensor(vectors, dtype=torch.float32).detach().cpu()
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"vectors must be a (T, d) tensor or a list of T equally long lists of numbers: {error}"
                ) from None
            if vectors.dim() != 2:
                raise ValueError(
                    f"vectors must have shape (T, d), one vector per token, but have shape {tuple(vectors.shape)}"
                )
            if not 1 <= vectors.shape[1] <= MAX_FEATURES:
                raise ValueError(
                    f"this widget shows vectors of 1 to {MAX_FEATURES} numbers, but the vectors have {vectors.shape[1]}"
                )
            if not torch.isfinite(vectors).all():
                raise ValueError("vectors contain nan or inf; every number must be finite")
            if tokens is None:
                tokens = [f"x{i + 1}" for i in range(vectors.shape[0])]
        tokens = self._check_tokens(DEFAULT_SENTENCE if tokens is None else tokens)
        if vectors is not None and len(tokens) != vectors.shape[0]:
            raise ValueError(
                f"every token needs one vector: {len(tokens)} tokens but {vectors.shape[0]} vectors were given"
            )
        self.seed, self.dim = seed, (vectors.shape[1] if vectors is not None else dim)
        self.drawn = vectors is None
        self.vocabulary: dict[str, torch.Tensor] = {}
        for i, token in enumerate(tokens):
            vector = vectors[i] if vectors is not None else drawn_vector(token, seed, dim)
            if token in self.vocabulary and not torch.equal(self.vocabulary[token], vector):
                raise ValueError(
                    f"the token {token!r} occurs twice with different vectors; in this widget a token is its vector, "
                    "so give each distinct token one vector (or name the two differently, e.g. 'the' and 'the2')"
                )
            self.vocabulary[token] = vector
        if query is None:
            query = len(tokens) - 1
        if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < len(tokens):
            raise ValueError(f"query must be a token index from 0 to {len(tokens) - 1}, but {query!r} was given")
        super().__init__(device=device)
        self.tokens = tokens
        self.kind = "attention"
        self.title = "Attention explorer: one query, its scores, its weights and its output"
        self.view = {"query": query, "temperature": TEMPERATURES.index(1.0), "scaled": True, "causal": False}
        self.inputs = {"sentence": " ".join(tokens)}
        self._start()

    # -- input checks -------------------------------------------------------------------
    @staticmethod
    def _check_tokens(tokens) -> list[str]:
        if isinstance(tokens, str):
            tokens = tokens.split()
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("tokens must be a list of strings or one string of words separated by spaces")
        if not tokens:
            raise ValueError("tokens is empty; give at least one token")
        if len(tokens) > MAX_TOKENS:
            raise ValueError(f"this widget shows 1 to {MAX_TOKENS} tokens, but {len(tokens)} were given")
        for token in tokens:
            if not token or token != token.strip() or len(token.split()) != 1:
                raise ValueError(f"each token must be one non-empty word without spaces, but {token!r} was given")
        return list(tokens)

    def _parse_sentence(self, text: str) -> list[str]:
        words = text.split()
        if not words:
            raise WidgetInputError("the sentence is empty: type a few words separated by spaces", "sentence")
        if len(words) > MAX_TOKENS:
            raise WidgetInputError(
                f"the sentence has {len(words)} words; this widget shows at most {MAX_TOKENS}", "sentence"
            )
        unknown = [w for w in dict.fromkeys(words) if w not in self.vocabulary]
        if unknown and not self.drawn:
            known = ", ".join(self.vocabulary)
            raise WidgetInputError(
                f"unknown token{'s' if len(unknown) > 1 else ''} {', '.join(repr(w) for w in unknown)}: "
                f"this sentence's vectors were given, so only these tokens have one: {known}",
                "sentence",
            )
        for word in unknown:
            self.vocabulary[word] = drawn_vector(word, self.seed, self.dim)
        return words

    # -- compute ------------------------------------------------------------------------
    def compute(self, device: torch.device) -> dict:
        """Scores, weights and outputs of every query, for every temperature, with and without
        the sqrt(d_k) scale and the causal mask: the browser picks what its controls show."""
        tokens = self._parse_sentence(self.inputs.get("sentence", " ".join(self.tokens)))
        self.tokens = tokens
        T = len(tokens)
        x = torch.stack([self.vocabulary[t] for t in tokens]).to(device)  # (T, d)
        d_k = x.shape[1]
        mask = causal_mask(T, device=device)  # (T, T), True = may attend
        # One batch for every setting: scores Q K^T / (sqrt(d_k) tau) when scaled, Q K^T / tau when not.
        base = attention_scores(x, x)  # (T, T), divided by sqrt(d_k)
        tau = torch.tensor(TEMPERATURES, device=device)  # (n_tau,)
        factor = torch.stack([math.sqrt(d_k) / tau, 1.0 / tau])  # (2, n_tau): [unscaled, scaled]
        scores = base * factor[:, None, :, None, None]  # (2, 1, n_tau, T, T)
        scores = torch.cat(
            [scores, scores.masked_fill(~mask, float("-inf"))], dim=1
        )  # (2 scaled, 2 causal, n_tau, T, T)
        weights = softmax(scores)  # (2, 2, n_tau, T, T), rows sum to 1
        outputs = weights @ x  # (2, 2, n_tau, T, d): h_i = sum_j a_ij x_j
        given = {"words": list(self.vocabulary), "vectors": [v.tolist() for v in self.vocabulary.values()]}
        return {
            "tokens": list(tokens),
            "d": d_k,
            "vectors": rounded(x),
            "temperatures": list(TEMPERATURES),
            "weights": rounded(weights),
            "scores": rounded(scores, 3),
            "outputs": rounded(outputs, 3),
            # What the website needs to compute a typed sentence (js/01_attention.js, attentionData):
            # the limit, and every token's vector (the given ones, unrounded float32) or the
            # generator's seed (reduced to 32 bits, as drawn_vector uses it).
            "max_tokens": MAX_TOKENS,
            "drawn": self.drawn,
            "seed": self.seed & 0xFFFFFFFF,
            "vocabulary": None if self.drawn else given,
        }

    def adjust_view(self, view: dict, data: dict) -> dict:
        view["query"] = min(int(view.get("query", 0)), len(data["tokens"]) - 1)
        return view

    def shown(self) -> dict:
        """What the picture shows now: the chosen query's scores, weights and output."""
        data, view = self.data, self.view
        s, c, t, i = int(view["scaled"]), int(view["causal"]), view["temperature"], view["query"]
        return {
            "query_token": data["tokens"][i],
            "temperature": data["temperatures"][t],
            "scores": [float("-inf") if v is None else v for v in data["scores"][s][c][t][i]],
            "weights": data["weights"][s][c][t][i],
            "output": data["outputs"][s][c][t][i],
        }
