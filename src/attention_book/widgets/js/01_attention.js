// -- chapter 1: AttentionExplorer --------------------------------------------------------
import { checkbox, dataOf, fixed, make, select, shorten, slider, textInput } from "./kit.js";
import { barChart, colourBar, heatmap, newPicture, wrapLines, writeText } from "./pictures.js";
import { WidgetInputError, pyRepr, pySplit, rounder, softmaxRow } from "./python.js";

// The explorer's state: its frame, its controls, and `built`, the picture drawn for the current tokens and layout.
function attentionExplorer(frame) {
  const { model, view } = frame;
  const temperature = slider(frame, "temperature", "temperature τ", {
    min: 0,
    max: dataOf(model).temperatures.length - 1,
    step: 1,
    value: view.temperature,
    show: (i) => fixed(dataOf(model).temperatures[i], 2),
    onInput: (i) => frame.setView({ temperature: i }),
  });
  const query = select(frame, "query", "query token", [], view.query, (q) => frame.setView({ query: q }));
  checkbox(frame, "scaled", "divide scores by √d_k", view.scaled, (v) => frame.setView({ scaled: v }));
  checkbox(frame, "causal", "causal (look back only)", view.causal, (v) => frame.setView({ causal: v }));
  const sentence = textInput(frame, "sentence", "sentence", model.get("inputs").sentence, "edit the sentence");
  const explorer = { frame, view, temperature, query, sentence, built: null };
  return () => drawAttention(explorer);
}

const ATTENTION_EXPLAINED = "bars: weights a_j of the query's row; above each bar its scaled score s_j / τ";

function buildAttention(explorer, data) {
  const { frame, view } = explorer;
  const T = data.tokens.length;
  const labels = data.tokens.map((t) => shorten(t, 8));
  const onRowClick = (i) => frame.setView({ query: i });
  const parts = frame.layout.narrow
    ? attentionNarrow(frame, data, { labels, onRowClick })
    : attentionWide(frame, data, { labels, onRowClick });
  explorer.built = { tokens: data.tokens.join(" "), layout: frame.layout.key, ...parts };
  explorer.query.fill(
    data.tokens.map((t, i) => [`${i + 1}: ${t}`, i]),
    Math.min(view.query, T - 1),
  );
  explorer.temperature.setRange(0, data.temperatures.length - 1);
  explorer.sentence.value = data.tokens.join(" ");
}

// A narrow screen: heading, bars, then the matrix under them, then the output.
function attentionNarrow(frame, data, { labels, onRowClick }) {
  const T = data.tokens.length;
  const W = frame.layout.width;
  const lines = wrapLines(ATTENTION_EXPLAINED, W - 12, 11);
  const barsY = 52 + 14 * lines.length; // under a heading of up to two lines
  const labelWidth = 6.4 * Math.max(...labels.map((l) => l.length));
  const cell = Math.min(36, (W - labelWidth - 16) / T);
  const mapX = labelWidth + 10;
  const mapY = barsY + 150 + 12 + 4.9 * Math.max(...labels.map((l) => l.length)) + 26;
  const below = mapY + T * cell + 8 + 4.9 * Math.max(...labels.map((l) => l.length));
  const outputLines = wrapLines(
    `output h = Σ_j a_j x_j = [${data.outputs[0][0][0][0].map(() => "-0.00").join(", ")}]`,
    W - 12,
    11,
    { monospace: true },
  ).length;
  const svg = newPicture(frame, W, below + 56 + 14 * outputLines);
  const heading = make("svg:text", { x: 6, y: 14, "font-weight": "bold", "font-size": 12 }, svg, "");
  writeText(make("svg:text", { x: 6, y: 48, "font-size": 11, fill: "#444" }, svg), ATTENTION_EXPLAINED, W - 12);
  const bars = barChart(svg, {
    x: 44,
    y: barsY,
    width: W - 52,
    height: 150,
    labels,
    yLabel: "attention weight a_j",
  });
  const map = heatmap(svg, frame.colour, {
    x: mapX,
    y: mapY,
    cell,
    rows: T,
    cols: T,
    rowLabels: labels,
    colLabels: labels,
    xTitle: "attention matrix A (keys →)",
    font: 10,
    onRowClick,
  });
  colourBar(svg, frame.colour, { x: mapX, y: below + 6, width: Math.min(T * cell, 160), label: "weight" });
  const output = make("svg:text", { x: 6, y: below + 48, "font-size": 11, "font-family": "monospace" }, svg, "");
  return { bars, map, heading, output, wrap: W - 12 };
}

function attentionWide(frame, data, { labels, onRowClick }) {
  const T = data.tokens.length;
  const svg = newPicture(frame, 660, 330);
  const heading = make("svg:text", { x: 70, y: 16, "font-weight": "bold", "font-size": 13 }, svg, "");
  make("svg:text", { x: 70, y: 34, "font-size": 11, fill: "#444" }, svg, ATTENTION_EXPLAINED);
  const bars = barChart(svg, { x: 70, y: 44, width: 300, height: 200, labels, yLabel: "attention weight a_j" });
  const cell = Math.min(26, 190 / T);
  const map = heatmap(svg, frame.colour, {
    x: 470,
    y: 60,
    cell,
    rows: T,
    cols: T,
    rowLabels: labels,
    colLabels: labels,
    xTitle: "attention matrix A (keys →)",
    onRowClick,
  });
  colourBar(svg, frame.colour, { x: 470 + T * cell + 8, y: 60, height: T * cell, label: "" });
  const output = make("svg:text", { x: 70, y: 312, "font-size": 12, "font-family": "monospace" }, svg, "");
  return { bars, map, heading, output, wrap: null };
}

function drawAttention(explorer) {
  const { frame } = explorer;
  const data = dataOf(frame.model);
  const stale = !explorer.built || explorer.built.tokens !== data.tokens.join(" ");
  if (stale || explorer.built.layout !== frame.layout.key) buildAttention(explorer, data);
  const { built } = explorer;
  const T = data.tokens.length;
  const v = frame.view;
  const q = Math.min(v.query, T - 1);
  const s = v.scaled ? 1 : 0;
  const c = v.causal ? 1 : 0;
  const weights = data.weights[s][c][v.temperature];
  const scores = data.scores[s][c][v.temperature];
  const row = weights[q];
  built.bars.set(
    row,
    scores[q].map((x) => (x === null ? "masked" : fixed(x, 2))),
    row.map((w) => frame.colour(w)),
    row.map((_, j) => (j === q ? ["#d62728", 2.6] : ["#000", 0.8])),
  );
  built.map.set(weights);
  built.map.mark(q);
  const tau = data.temperatures[v.temperature];
  writeText(
    built.heading,
    `query '${data.tokens[q]}' · τ = ${fixed(tau, 2)} · ${v.scaled ? "÷√d_k" : "unscaled"}${v.causal ? " · causal" : ""}`,
    built.wrap,
  );
  const h = data.outputs[s][c][v.temperature][q];
  writeText(built.output, `output h = Σ_j a_j x_j = [${h.map((x) => fixed(x, 2)).join(", ")}]`, built.wrap);
  explorer.query.set(q);
  explorer.temperature.set(v.temperature);
}

// -- chapter 1: attention_book.widgets.attention_explorer ---------------------------------
// drawn_vector's generator (defined in the comment above it in attention_explorer.py), step
// for step: 32-bit integers kept unsigned (>>> 0) and multiplied with Math.imul, floats in
// float64 with the same operations in the same order, ln written out as there, so a word
// gets the same float32 numbers here as in Python.
const GOLDEN32 = 0x9e3779b9;
function mix32(x) {
  // _mix32: MurmurHash3's 32-bit finaliser
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x85ebca6b) >>> 0;
  x = (x ^ (x >>> 13)) >>> 0;
  x = Math.imul(x, 0xc2b2ae35) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}
function fnv1a(bytes) {
  // _fnv1a: the 32-bit FNV-1a hash
  let h = 0x811c9dc5;
  for (const byte of bytes) h = Math.imul(h ^ byte, 0x01000193) >>> 0;
  return h;
}
export function naturalLog(x) {
  // _natural_log: ln(x) for 0 < x < 1 with + - * / only
  let exponent = 0;
  while (x < 1) {
    x *= 2;
    exponent -= 1;
  }
  if (x > Math.SQRT2) {
    x /= 2;
    exponent += 1;
  }
  const t = (x - 1) / (x + 1);
  const t2 = t * t;
  let term = t;
  let total = 0;
  for (let k = 1; k < 30; k += 2) {
    total += term / k;
    term *= t2;
  }
  return 2 * total + exponent * Math.LN2;
}
export function drawnVector(word, seed, dim) {
  // drawn_vector, as float32 numbers
  const key = mix32((fnv1a(new TextEncoder().encode(word)) + mix32(seed >>> 0)) >>> 0);
  let counter = 0;
  const normals = [];
  while (normals.length < dim) {
    const pair = [];
    for (let n = 0; n < 2; n += 1) {
      counter += 1;
      const bits = mix32((key + Math.imul(counter, GOLDEN32)) >>> 0);
      pair.push((bits + 0.5) / 2147483648 - 1); // (-1, 1)
    }
    const [a, b] = pair;
    const s = a * a + b * b;
    if (s > 0 && s < 1) {
      const factor = Math.sqrt((-2 * naturalLog(s)) / s);
      normals.push(a * factor, b * factor);
    }
  }
  return normals.slice(0, dim).map((v) => Math.fround(v));
}

// AttentionExplorer._parse_sentence: the words, or the kernel's message.
export function parseSentence(text, saved) {
  const words = pySplit(text);
  if (!words.length)
    throw new WidgetInputError("the sentence is empty: type a few words separated by spaces", "sentence");
  if (words.length > saved.max_tokens) {
    throw new WidgetInputError(
      `the sentence has ${words.length} words; this widget shows at most ${saved.max_tokens}`,
      "sentence",
    );
  }
  if (!saved.drawn) {
    const known = saved.vocabulary.words;
    const unknown = [...new Set(words)].filter((word) => !known.includes(word));
    if (unknown.length) {
      throw new WidgetInputError(
        `unknown token${unknown.length > 1 ? "s" : ""} ${unknown.map((word) => pyRepr(word)).join(", ")}: ` +
          `this sentence's vectors were given, so only these tokens have one: ${known.join(", ")}`,
        "sentence",
      );
    }
  }
  return words;
}

// AttentionExplorer.compute (float32 in torch, float64 here): for every temperature stop,
// with and without the sqrt(d_k) scale and the causal mask, every query's scores, weights and
// output, indexed [scaled][causal][temperature][query]; a masked score is null.
export function attentionData(inputs, saved, { exact = false } = {}) {
  const round = rounder(exact);
  const tokens = parseSentence(inputs.sentence, saved);
  const given = saved.vocabulary;
  const x = tokens.map((word) =>
    saved.drawn ? drawnVector(word, saved.seed, saved.d) : given.vectors[given.words.indexOf(word)],
  );
  const d = x[0].length;
  const root = Math.sqrt(d);
  const base = x.map((query) => x.map((key) => query.reduce((sum, v, c) => sum + v * key[c], 0) / root)); // attention_scores
  const taus = saved.temperatures.map((tau) => Math.fround(tau)); // torch.tensor(TEMPERATURES): float32
  const masked = (rows) => rows.map((row) => (Array.isArray(row) ? masked(row) : Number.isFinite(row) ? row : null));
  const scores = [];
  const weights = [];
  const outputs = [];
  for (const scaled of [0, 1]) {
    const per = { scores: [], weights: [], outputs: [] };
    for (const causal of [0, 1]) {
      const settings = taus.map((tau) => {
        const factor = scaled ? 1 / tau : root / tau;
        const s = base.map((row, i) => row.map((b, j) => (causal && j > i ? -Infinity : b * factor)));
        const w = s.map(softmaxRow);
        const h = w.map((row) => x[0].map((_, c) => row.reduce((sum, a, j) => sum + a * x[j][c], 0))); // h_i = sum_j a_ij x_j
        return { s, w, h };
      });
      per.scores.push(
        masked(
          round(
            settings.map((one) => one.s),
            3,
          ),
        ),
      );
      per.weights.push(round(settings.map((one) => one.w)));
      per.outputs.push(
        round(
          settings.map((one) => one.h),
          3,
        ),
      );
    }
    scores.push(per.scores);
    weights.push(per.weights);
    outputs.push(per.outputs);
  }
  return {
    tokens,
    d,
    vectors: round(x),
    temperatures: saved.temperatures.slice(),
    weights,
    scores,
    outputs,
    max_tokens: saved.max_tokens,
    drawn: saved.drawn,
    seed: saved.seed,
    vocabulary: saved.vocabulary,
  };
}

export const attentionUnit = {
  kind: "attention",
  setup: attentionExplorer,
  pageCompute: (saved) => (saved.max_tokens && "drawn" in saved ? attentionData : null),
  adjustView: (frame, data) => {
    frame.view.query = Math.min(frame.view.query, data.tokens.length - 1); // AttentionExplorer.adjust_view
  },
};
