// -- chapter 7: BERT's WordPiece tokenizer, as the `tokenizers` package applies MiniLM's tokenizer.json ------
// PretrainedEncoder.encode_sentence (attention_book.pretrained) tokenizes with the `tokenizers` package; on the
// website this file does it, with the rules the page's model script carries
// (attention_book.widgets.pretrained_page.tokenizer_rules): the special tokens ([CLS], [MASK], ...) are found in
// the raw text; the text between them is normalised (BertNormalizer: control characters removed, white space
// made spaces, CJK characters spaced out, accents stripped, lower case), cut into words at spaces and around
// each punctuation mark (BertPreTokenizer), and each word into the longest pieces of the vocabulary, from the
// left (WordPiece: a word with a character no piece covers, or longer than max_word_characters, is [UNK]);
// [CLS] and [SEP] stand around, the pieces cut at max_len. tests/widgets/test_wordpiece.py compares the pieces
// with the Python tokenizer's, text by text and character by character.

// White space and the CJK ideographs, which BertNormalizer spaces out; the other classes of characters
// come with the rules (`classes`: removed, marks, alone), as the Python tokenizer's tables have them.
const SPACE = /\p{White_Space}/u; // Rust's char::is_whitespace
const CJK = [
  ...[0x3400, 0x4dbf, 0x4e00, 0x9fff, 0xf900, 0xfaff, 0x20000, 0x2a6df],
  ...[0x2a700, 0x2b73f, 0x2b740, 0x2b81f, 0x2b920, 0x2ceaf, 0x2f800, 0x2fa1f],
]; // sorted runs [first, last, ...], as inRuns reads them

// Whether `code` lies in one of the runs [first, last, first, last, ...] (sorted: binary search).
export function inRuns(runs, code) {
  let low = 0;
  let high = runs.length / 2 - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if (code < runs[2 * middle]) high = middle - 1;
    else if (code > runs[2 * middle + 1]) low = middle + 1;
    else return true;
  }
  return false;
}

// BertNormalizer(clean_text, handle_chinese_chars, strip_accents, lowercase), in that order.
export function bertNormalize(text, classes) {
  let cleaned = "";
  for (const ch of text) {
    const code = ch.codePointAt(0);
    if (ch === "\t" || ch === "\n" || ch === "\r") cleaned += " ";
    else if (!inRuns(classes.removed, code)) {
      if (SPACE.test(ch)) cleaned += " ";
      else cleaned += inRuns(CJK, code) ? ` ${ch} ` : ch;
    }
  }
  let normal = "";
  for (const ch of cleaned.normalize("NFD")) {
    if (!inRuns(classes.marks, ch.codePointAt(0))) normal += ch.toLowerCase(); // Rust lowers one character at a time
  }
  return normal;
}

// BertPreTokenizer: words split at white space, each punctuation character a word of its own.
export function bertWords(text, classes) {
  const words = [];
  let word = "";
  for (const ch of text) {
    const alone = inRuns(classes.alone, ch.codePointAt(0));
    if (alone || SPACE.test(ch)) {
      if (word) words.push(word);
      word = "";
      if (alone) words.push(ch);
    } else {
      word += ch;
    }
  }
  if (word) words.push(word);
  return words;
}

// WordPiece: the longest piece of the vocabulary from the left, then the longest "##"-piece, ...
export function wordPieces(word, rules, index) {
  const characters = Array.from(word);
  if (characters.length > rules.max_word_characters) return [rules.unknown];
  const pieces = [];
  let start = 0;
  while (start < characters.length) {
    let end = characters.length;
    let piece = null;
    for (; end > start; end -= 1) {
      const candidate = (start > 0 ? rules.prefix : "") + characters.slice(start, end).join("");
      if (index.has(candidate)) {
        piece = candidate;
        break;
      }
    }
    if (piece === null) return [rules.unknown];
    pieces.push(piece);
    start = end;
  }
  return pieces;
}

// The text cut at the special tokens (the leftmost first, the longest of those starting there), as the
// tokenizer's added vocabulary cuts it before normalising: [{ text, special }].
export function specialParts(text, specials) {
  const parts = [];
  let rest = text;
  while (rest) {
    let found = null;
    for (const special of specials) {
      const at = rest.indexOf(special);
      if (at >= 0 && (!found || at < found.at || (at === found.at && special.length > found.special.length))) {
        found = { at, special };
      }
    }
    if (!found) break;
    if (found.at > 0) parts.push({ text: rest.slice(0, found.at), special: false });
    parts.push({ text: found.special, special: true });
    rest = rest.slice(found.at + found.special.length);
  }
  if (rest) parts.push({ text: rest, special: false });
  return parts;
}

const indexes = new WeakMap(); // rules -> Map(piece -> id)
export function vocabularyIndex(rules) {
  let index = indexes.get(rules);
  if (!index) {
    index = new Map(rules.vocabulary.map((piece, id) => [piece, id]));
    indexes.set(rules, index);
  }
  return index;
}

// The tokenizer's encode(text) with the template [CLS] text [SEP], truncated to max_len tokens:
// { labels (the pieces), ids }.
export function wordpieceSentence(text, rules) {
  const index = vocabularyIndex(rules);
  const pieces = [];
  for (const part of specialParts(text, rules.specials)) {
    if (part.special) pieces.push(part.text);
    else {
      const words = bertWords(bertNormalize(part.text, rules.classes), rules.classes);
      for (const word of words) pieces.push(...wordPieces(word, rules, index));
    }
  }
  const labels = [rules.first, ...pieces.slice(0, Math.max(0, rules.max_len - 2)), rules.last];
  return { labels, ids: labels.map((piece) => index.get(piece)) };
}
