// -- the website's own computations (issue 35) ---------------------------------------------
// On the website there is no kernel. The controls whose numbers need only a little arithmetic
// (chapter 2's typed query, chapter 3's typed scores, chapter 5's d_model and base) compute
// them here instead, exactly as the Python widget does: the Python functions named in each
// comment are the reference, and tests/widgets/test_static_math.py runs both over the same
// inputs (numbers within 1e-4, the same messages for bad input). These functions touch no
// DOM; they are exported by name for that test (anywidget uses only the default export).

export class WidgetInputError extends Error {
  // attention_book.widgets._base.WidgetInputError
  constructor(message, control) {
    super(message);
    this.control = control || null;
  }
}

// Python's str.isspace() characters: what str.strip() and str.split() remove.
export const PY_SPACE =
  "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
export const PY_TRIM = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");
export const PY_RUNS = new RegExp(`[${PY_SPACE}]+`);

export function pyStrip(text, chars) {
  // str.strip() and str.strip(chars)
  if (chars === undefined) return text.replace(PY_TRIM, "");
  let start = 0;
  let end = text.length;
  while (start < end && chars.includes(text[start])) start += 1;
  while (end > start && chars.includes(text[end - 1])) end -= 1;
  return text.slice(start, end);
}

export function pySplit(text) {
  // str.split() with no separator
  return pyStrip(text)
    .split(PY_RUNS)
    .filter((word) => word !== "");
}

// Python's float(text) (ASCII digits; Python also reads other scripts' digits), or NaN where
// Python raises ValueError; a number too large for a float reads as an infinity, as in Python.
export const PY_FLOAT = /^[+-]?(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*|\d(?:_?\d)*\.?)(?:[eE][+-]?\d(?:_?\d)*)?$/;
export const PY_SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;
export function pyFloat(text) {
  const word = pyStrip(text);
  const special = PY_SPECIAL.exec(word);
  if (special)
    return special[2].toLowerCase() === "nan" ? { value: NaN } : { value: special[1] === "-" ? -Infinity : Infinity };
  if (!PY_FLOAT.test(word)) return null;
  return { value: Number(word.replace(/_/g, "")) };
}

export function pyInt(text) {
  // Python's int(text) in base 10 (ASCII digits) and str() of it, or null where it raises
  const word = pyStrip(text);
  if (!/^[+-]?\d(?:_?\d)*$/.test(word)) return null;
  const whole = BigInt(word.replace(/_/g, ""));
  return { value: Number(whole), text: whole.toString() };
}

export function pyRepr(text) {
  // repr() of a str
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of text) {
    const code = ch.codePointAt(0);
    if (ch === quote || ch === "\\") out += `\\${ch}`;
    else if (ch === "\t") out += "\\t";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch !== " " && /[\p{C}\p{Z}]/u.test(ch)) {
      const hex = code.toString(16);
      out +=
        code < 0x100
          ? `\\x${hex.padStart(2, "0")}`
          : code < 0x10000
            ? `\\u${hex.padStart(4, "0")}`
            : `\\U${hex.padStart(8, "0")}`;
    } else out += ch;
  }
  return out + quote;
}

// The exact decimal digits of |x| (x finite, non-zero) rounded half to even, as Python's
// formatting rounds: `keep(exponent)` says how many digits to keep.
export function roundedDigits(x, keep) {
  const [mantissa, power] = Math.abs(x).toExponential(99).split("e");
  let digits = mantissa.replace(".", "");
  let exponent = Number(power);
  const count = keep(exponent);
  if (count <= 0) {
    // every kept digit lies left of the first one: 0 or one unit of the last place
    const up = count === 0 && (digits[0] > "5" || (digits[0] === "5" && /[1-9]/.test(digits.slice(1))));
    return up ? { digits: "1", exponent: exponent + 1, count: 1 } : { digits: "", exponent, count: 0 };
  }
  const head = digits.slice(0, count);
  const tail = digits.slice(count);
  const up =
    tail[0] > "5" || (tail[0] === "5" && (/[1-9]/.test(tail.slice(1)) || Number(head[head.length - 1]) % 2 === 1));
  digits = head;
  if (up) {
    const raised = (BigInt(head) + 1n).toString();
    if (raised.length > head.length) exponent += 1;
    digits = raised.slice(0, head.length);
  }
  return { digits, exponent, count };
}

export function pyFixed(x, places) {
  // Python's f"{x:.{places}f}"
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  let whole = "0";
  let fraction = "0".repeat(places);
  if (x !== 0) {
    const { digits, exponent } = roundedDigits(x, (e) => e + 1 + places);
    if (digits) {
      const all = digits.padEnd(exponent + 1 + places, "0"); // the number times 10^places
      const padded = all.padStart(places + 1, "0");
      whole = padded.slice(0, padded.length - places);
      fraction = padded.slice(padded.length - places);
    }
  }
  return sign + whole + (places ? `.${fraction}` : "");
}

export function pyGeneral(x, precision = 6) {
  // Python's f"{x:.{precision}g}"
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const sign = x < 0 ? "-" : "";
  const { digits, exponent } = roundedDigits(x, () => precision);
  if (exponent >= -4 && exponent < precision) {
    let text;
    if (exponent >= 0) {
      const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
      text = `${whole}.${digits.slice(exponent + 1)}`;
    } else {
      text = `0.${"0".repeat(-exponent - 1)}${digits}`;
    }
    text = text.replace(/0+$/, "").replace(/\.$/, "");
    return sign + text;
  }
  const mantissa = `${digits[0]}.${digits.slice(1)}`.replace(/0+$/, "").replace(/\.$/, "");
  return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
}

export function formatExact(value) {
  // attention_book.analysis.formatting.format_exact
  const text = pyGeneral(value, 6);
  return text === "-0" ? "0" : text;
}

export function formatShort(value, digits = 2) {
  // attention_book.analysis.formatting.format_short
  const text = pyFixed(value, digits).replace(/0+$/, "").replace(/\.$/, "");
  return text === "-0" || text === "" ? "0" : text;
}

// attention_book.widgets._base.rounded: numpy's round (to even) at `digits` decimals.
export function roundTo(x, digits) {
  const scale = 10 ** digits;
  const y = x * scale;
  let r = Math.round(y);
  if (r - y === 0.5 && r % 2 !== 0) r -= 1;
  return r / scale;
}
export function rounder(exact) {
  const round = (values, digits = 4) =>
    Array.isArray(values) ? values.map((v) => round(v, digits)) : exact ? values : roundTo(values, digits);
  return round;
}

// attention_book.attention.softmax, sparsemax, hardmax and entropy (attention_book.soft_hard), on one row.
export function softmaxRow(z) {
  const largest = Math.max(...z);
  const shift = Number.isFinite(largest) ? largest : 0;
  const e = z.map((v) => Math.exp(v - shift));
  const total = Math.max(
    1,
    e.reduce((a, b) => a + b, 0),
  );
  return e.map((v) => v / total);
}
export function sparsemaxRow(z) {
  const sorted = z.slice().sort((a, b) => b - a);
  let cumulative = 0;
  let support = 0;
  const sums = sorted.map((v, k) => {
    cumulative += v;
    if (1 + (k + 1) * v > cumulative) support += 1;
    return cumulative;
  });
  support = Math.max(1, support);
  const theta = (sums[support - 1] - 1) / support;
  return z.map((v) => Math.max(v - theta, 0));
}
export function hardmaxRow(z) {
  const largest = Math.max(...z);
  const count = z.filter((v) => v === largest).length;
  return z.map((v) => (v === largest ? 1 / count : 0));
}
export function entropyOf(weights) {
  return 0 - weights.reduce((sum, w) => sum + (w > 0 ? w * Math.log(Math.max(w, 1e-30)) : 0), 0);
}
