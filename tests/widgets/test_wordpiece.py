"""Chapter 7's tokenizer on the website (js/wordpiece.js, issue 46) against the Python one.

PretrainedEncoder.encode_sentence tokenizes with the `tokenizers` package and MiniLM's tokenizer.json; the
page does it in JavaScript with the rules the page's model script carries (pretrained_page.tokenizer_rules).
Both must cut every text into the same word pieces (and ids): the sentences below (unknown words, accents,
punctuation, special tokens, CJK, emoji, control characters, words over 100 characters, texts over 512
pieces), 200 of chapter 7's reviews, and every code point of the Basic Multilingual Plane and every 7th of
the others, each between letters and alone. The head viewer's checks must give the same messages.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from attention_book.widgets.pretrained_page import tokenizer_rules

SENTENCES = [
    "The plot is thin, but the acting is not bad at all.",
    "Great!",
    "I paid the cheque into the bank on Monday.",
    "unbelievably overwrought melodramatics",
    "Zyxqvtrw blorf snarkle!",
    "Café naïve résumé Ångström façade",
    "ÉCOLE ÜBER straße",
    "ΟΔΟΣ Σίσυφος",
    "İstanbul ılık",
    "ﬁnancial ﬂow",
    "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ",
    "a,b;c:d!e?f(g)h[i]j{k}l<m>n",
    "$100 + 50% = #win @home ~tilde `tick` ^caret | pipe",
    "«quoted» “curly” ‘single’ — dash – en … ellipsis",
    "don't won't it's o'clock rock'n'roll",
    "e-mail x-ray 3.14159 1,000,000",
    "Hello [MASK] world",
    "[CLS][SEP][PAD][UNK]",
    "[mask] [cls] lower-case specials",
    "text[MASK]glued[SEP]",
    "[MASKED] [[MASK]]",
    "猫が好き and 中文字符",
    "한국어 텍스트",
    "日本語のテキスト、句読点。",
    "Привет, мир!",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีครับ",
    "🐱 🐶 cats and dogs 👍🏽",
    "zero\u200bwidth\u200cjoiners\u200d",
    "soft\u00adhyphen",
    "bom\ufeffinside",
    "\u0085next line\u2028line sep\u2029para",
    "tab\tseparated\vvertical\fform",
    "control\x01\x02\x1fchars",
    "nul\x00byte",
    "replacement \ufffd char",
    "private \ue000 use",
    "combining e\u0301 a\u0308 o\u0327",
    "arabic mark \u061d new",
    "unassigned \u0378 \U000e0000",
    "a" * 100,
    "a" * 101,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x " * 45,
    "word " * 600,
    "",
    "   ",
    "\u3000",
    "...",
    "a",
    "THE END",
]


@pytest.fixture(scope="module")
def rules(minilm):
    from attention_book.pretrained import minilm_files

    return {**tokenizer_rules(minilm_files()["tokenizer"]), "max_len": minilm.max_len}


RUNNER = r"""
const chunks = [];
process.stdin.on("data", (chunk) => chunks.push(chunk));
process.stdin.on("end", async () => {
  const module = await import(process.argv[1]);
  const { fn, rules, page, texts } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const answers = texts.map((text) => {
    try {
      return fn === "wordpieceSentence" ? module.wordpieceSentence(text, rules) : module.pretrainedTokens(text, rules, page);
    } catch (error) {
      if (!(error instanceof module.WidgetInputError)) return { crash: String(error && error.stack) };
      return { error: { control: error.control, message: error.message } };
    }
  });
  process.stdout.write(JSON.stringify(answers));
});
"""


@pytest.fixture(scope="module")
def run_js(tmp_path_factory, rules):
    from attention_book.widgets._base import widget_module_source

    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to run the widgets' JavaScript")
    module = tmp_path_factory.mktemp("wordpiece") / "widgets.mjs"
    module.write_text(widget_module_source(), encoding="utf-8")

    def run(texts: list[str], fn: str = "wordpieceSentence", page: dict | None = None) -> list:
        payload = json.dumps({"fn": fn, "rules": rules, "page": page, "texts": texts})
        completed = subprocess.run(
            [node, "-e", RUNNER, module.as_uri()], input=payload, capture_output=True, timeout=300, encoding="utf-8"
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        return json.loads(completed.stdout)

    return run


def python_pieces(minilm, texts: list[str]) -> list[dict]:
    """The Python tokenizer's pieces and ids (PretrainedEncoder.encode: [CLS] text [SEP], cut at max_len)."""
    minilm.tokenizer.enable_truncation(max_length=minilm.max_len)
    encodings = minilm.tokenizer.encode_batch(texts)
    return [{"labels": list(e.tokens), "ids": list(e.ids)} for e in encodings]


def test_sentences_and_reviews_are_cut_into_the_python_tokenizers_pieces(minilm, run_js):
    from attention_book.data.reviews import load_reviews

    texts = SENTENCES + list(load_reviews().train.texts[:200])
    expected = python_pieces(minilm, texts)
    for text in SENTENCES[:3]:  # the same pieces encode_sentence gives the head viewer
        assert minilm.encode([text]).labels[0] == python_pieces(minilm, [text])[0]["labels"]
    problems = [
        f"{text!r}: JavaScript {js}, Python {py}" for text, js, py in zip(texts, run_js(texts), expected) if js != py
    ]
    assert not problems, "\n".join(problems[:20])
    lengths = [len(py["labels"]) for py in expected]
    assert max(lengths) == 512 and "[UNK]" in sum((py["labels"] for py in expected), [])


def test_every_character_is_treated_as_the_python_tokenizer_treats_it(minilm, run_js):
    codes = [c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF] + list(range(0x10000, 0x110000, 7))
    texts = [f"a{chr(c)}b {chr(c)}" for c in codes]
    expected = [py["labels"] for py in python_pieces(minilm, texts)]
    got = [js["labels"] for js in run_js(texts)]
    problems = [f"U+{c:04X}: JavaScript {js}, Python {py}" for c, js, py in zip(codes, got, expected) if js != py]
    assert not problems, f"{len(problems)} characters differ:\n" + "\n".join(problems[:20])


def test_the_head_viewers_checks_give_the_python_messages(minilm, run_js, page_models):
    """pretrainedTokens (js/04_heads.js) against HeadViewer._encode with MiniLM's encode_sentence."""
    from attention_book.widgets import HeadViewer
    from attention_book.widgets._base import WidgetInputError

    viewer = HeadViewer(minilm, minilm.encode_sentence, "Great!", device="cpu")
    page = json.loads(viewer.page_model)
    texts = [*SENTENCES, "x " * 38, "x " * 39, "word " * 39, "\t", " \u00a0 "]
    expected = []
    for text in texts:
        try:
            tokens, labels = viewer._encode(text)
            expected.append({"labels": labels, "ids": tokens[0].tolist()})
        except WidgetInputError as error:
            expected.append({"error": {"control": "sentence", "message": str(error)}})
    answers = run_js(texts, fn="pretrainedTokens", page=page)
    problems = [f"{t!r}: JavaScript {js}, Python {py}" for t, js, py in zip(texts, answers, expected) if js != py]
    assert not problems, "\n".join(problems)
    messages = [py["error"]["message"] for py in expected if "error" in py]
    assert len(messages) >= 6 and len(expected) - len(messages) >= 20
    assert "the sentence is empty: type a few words and press Enter" in messages
    assert "the sentence has 512 word pieces with [CLS] and [SEP], but at most 40 fit; shorten it" in messages
