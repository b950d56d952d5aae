// -- chapter 3: SoftHardExplorer ----------------------------------------------------------
import { dataOf, fixed, make, shorten, slider, textInput } from "./kit.js";
import { barChart, newPicture } from "./pictures.js";
import {
  WidgetInputError,
  entropyOf,
  formatExact,
  hardmaxRow,
  pyFloat,
  pyRepr,
  pyStrip,
  rounder,
  softmaxRow,
  sparsemaxRow,
} from "./python.js";

// The explorer's state: its frame, the β slider, and `built`, the picture drawn for the current scores and layout.
function softHardExplorer(frame) {
  const { model } = frame;
  const beta = slider(frame, "beta", "inverse temperature β", {
    min: 0,
    max: dataOf(model).betas.length - 1,
    step: 1,
    value: frame.view.beta,
    show: (i) => fixed(dataOf(model).betas[i], 2),
    onInput: (i) => frame.setView({ beta: i }),
  });
  textInput(frame, "scores", "scores", model.get("inputs").scores, "edit the scores");
  const explorer = { frame, beta, built: null };
  return () => drawSoftHard(explorer);
}

const METHODS = [
  ["softmax", "softmax(βs)"],
  ["sparsemax", "sparsemax(βs)"],
  ["hardmax", "hardmax(s)"],
];

// Wide: the three bar charts side by side, the entropy plot under them. Narrow: the three
// charts one under another (title left, entropy and count right), then the entropy plot,
// its legend under it.
function buildSoftHard(explorer, data) {
  const { frame } = explorer;
  const labels = data.labels.map((l) => shorten(l, 8));
  const { narrow, width: W } = frame.layout;
  const slant = 4 * Math.max(...labels.map((l) => l.length)); // the depth of the slanted bar labels
  const panelHeight = 20 + 110 + 18 + slant;
  const svg = narrow ? newPicture(frame, W, 3 * panelHeight + 240) : newPicture(frame, 660, 400);
  const panels = METHODS.map(([key, name], m) =>
    narrow ? narrowPanel(svg, { key, name, m, W, panelHeight, labels }) : widePanel(svg, { key, name, m, labels }),
  );
  // Entropy against β (log axis), with a marker at the slider.
  const box = narrow ? [48, 3 * panelHeight + 30, W - 60, 110] : [60, 250, 440, 110];
  const { marker, px } = entropyPlot(svg, data, box, narrow);
  explorer.built = { key: JSON.stringify([data.labels, data.scores]), layout: frame.layout.key, panels, marker, px };
}

function narrowPanel(svg, { key, name, m, W, panelHeight, labels }) {
  return {
    key,
    title: make("svg:text", { x: 6, y: 14 + m * panelHeight, "font-size": 12, "font-weight": "bold" }, svg, name),
    info: make("svg:text", { x: W - 4, y: 14 + m * panelHeight, "text-anchor": "end", "font-size": 11 }, svg, ""),
    bars: barChart(svg, {
      x: 44,
      y: 20 + m * panelHeight,
      width: W - 52,
      height: 110,
      labels,
      yLabel: "weight",
    }),
  };
}

function widePanel(svg, { key, name, m, labels }) {
  return {
    key,
    title: make(
      "svg:text",
      {
        x: 50 + m * 210 + 90,
        y: 16,
        "text-anchor": "middle",
        "font-size": 12,
        "font-weight": "bold",
        "data-room": 200,
      },
      svg,
      name,
    ),
    info: make(
      "svg:text",
      { x: 50 + m * 210 + 90, y: 32, "text-anchor": "middle", "font-size": 11, "data-room": 200 },
      svg,
      "",
    ),
    bars: barChart(svg, {
      x: 50 + m * 210,
      y: 40,
      width: 170,
      height: 130,
      labels,
      yLabel: m === 0 ? "weight" : "",
    }),
  };
}

// The entropy of each method's weights against β in the box [x0, y0, w, h]: its axes, then its curves.
function entropyPlot(svg, data, [x0, y0, w, h], narrow) {
  const g = make("svg:g", {}, svg);
  const n = data.betas.length;
  const top = Math.log(data.labels.length) || 1;
  const px = (i) => x0 + (w * i) / (n - 1);
  const py = (e) => y0 + h - (h * e) / top;
  make("svg:line", { x1: x0, y1: y0 + h, x2: x0 + w, y2: y0 + h, stroke: "#333" }, g);
  make("svg:line", { x1: x0, y1: y0, x2: x0, y2: y0 + h, stroke: "#333" }, g);
  make(
    "svg:text",
    { x: x0 + w / 2, y: y0 + h + 30, "text-anchor": "middle", "font-size": 11 },
    g,
    "inverse temperature β (log scale)",
  );
  make(
    "svg:text",
    {
      x: x0 - 36,
      y: y0 + h / 2,
      transform: `rotate(-90 ${x0 - 36} ${y0 + h / 2})`,
      "text-anchor": "middle",
      "font-size": 11,
    },
    g,
    "entropy (nats)",
  );
  make("svg:text", { x: x0, y: y0 - 8, "font-size": 12, "font-weight": "bold" }, g, "Entropy of the weights across β");
  for (const e of [0, top])
    make("svg:text", { x: x0 - 4, y: py(e) + 4, "text-anchor": "end", "font-size": 10 }, g, fixed(e, 2));
  [0, Math.floor((n - 1) / 2), n - 1].forEach((i) =>
    make(
      "svg:text",
      { x: px(i), y: y0 + h + 14, "text-anchor": "middle", "font-size": 10 },
      g,
      fixed(data.betas[i], 2),
    ),
  );
  entropyCurves(g, data, { px, py, box: [x0, y0, w, h], narrow });
  const marker = make("svg:line", { y1: y0, y2: y0 + h, stroke: "#d62728", "stroke-width": 1.5 }, g);
  return { marker, px };
}

function entropyCurves(g, data, { px, py, box: [x0, y0, w, h], narrow }) {
  const colours = { softmax: "#0072b2", sparsemax: "#e69f00", hardmax: "#555" };
  METHODS.forEach(([key], m) => {
    const points = data.entropy[key].map((e, i) => `${px(i)},${py(e)}`).join(" ");
    make(
      "svg:polyline",
      {
        points,
        fill: "none",
        stroke: colours[key],
        "stroke-width": 2,
        "stroke-dasharray": key === "hardmax" ? "4 3" : null,
      },
      g,
    );
    const [lx, ly] = narrow ? [x0 + m * 80, y0 + h + 50] : [x0 + w + 8, y0 + 14 + m * 16];
    make("svg:text", { x: lx, y: ly, "font-size": 11, fill: colours[key] }, g, key);
  });
}

function drawSoftHard(explorer) {
  const { frame } = explorer;
  const data = dataOf(frame.model);
  const stale = !explorer.built || explorer.built.key !== JSON.stringify([data.labels, data.scores]);
  if (stale || explorer.built.layout !== frame.layout.key) buildSoftHard(explorer, data);
  const { built } = explorer;
  const b = frame.view.beta;
  for (const panel of built.panels) {
    const weights = panel.key === "hardmax" ? data.hardmax : data[panel.key][b];
    // counted before rounding (the kernel's, or softHardData's): a softmax weight of 1e-9 is drawn as
    // 0.00 but is not zero, which is chapter 3's point about softmax
    const nonzero = data.nonzero ? data.nonzero[panel.key][b] : weights.filter((w) => w > 0).length;
    const entropy = data.entropy[panel.key][b];
    panel.bars.set(
      weights,
      weights.map((w) => fixed(w, 2)),
      weights.map((w) => frame.colour(w)),
    );
    panel.info.textContent = `entropy ${fixed(entropy, 2)} · ${nonzero} non-zero`;
  }
  built.marker.setAttribute("x1", built.px(b));
  built.marker.setAttribute("x2", built.px(b));
  explorer.beta.set(b);
}

// -- chapter 3: attention_book.widgets.soft_hard_explorer ---------------------------------
const SCORE_LIMIT = 20;
const MAX_SCORE_KEYS = 10;

export function parseScores(text, limit = SCORE_LIMIT, maxKeys = MAX_SCORE_KEYS) {
  // parse_scores
  const entries = pyStrip(pyStrip(text), "[]()")
    .split(",")
    .map((entry) => pyStrip(entry));
  if (!entries.some((entry) => entry)) {
    throw new WidgetInputError(
      'type one score per key, separated by commas, for example "river=1.9, bank=1.5, the=0.2"',
    );
  }
  if (entries.length > maxKeys)
    throw new WidgetInputError(`${entries.length} scores were given; this widget shows 1 to ${maxKeys} keys`);
  const labels = [];
  const scores = [];
  entries.forEach((entry, index) => {
    if (!entry) throw new WidgetInputError(`entry ${index + 1} is empty: remove the extra comma`);
    const cut = entry.lastIndexOf("=");
    const number = cut < 0 ? entry : entry.slice(cut + 1);
    const label = pyStrip(cut < 0 ? "" : entry.slice(0, cut)) || `key ${index + 1}`;
    const parsed = pyFloat(number);
    if (parsed === null) {
      throw new WidgetInputError(
        `${pyRepr(pyStrip(number))} (entry ${index + 1}) is not a number; write "label=score" or just the score`,
      );
    }
    const score = parsed.value;
    if (!Number.isFinite(score))
      throw new WidgetInputError(`${pyRepr(pyStrip(number))} (entry ${index + 1}) is not a finite number`);
    if (Math.abs(score) > limit) {
      throw new WidgetInputError(
        `the score of ${pyRepr(label)} is ${formatExact(score)}; keep scores between ${formatExact(-limit)} and ${formatExact(limit)}`,
      );
    }
    labels.push(label);
    scores.push(score);
  });
  return [labels, scores];
}

// SoftHardExplorer.compute: `inputs.scores` and the slider's stops (`saved.betas`) -> data.
export function softHardData(inputs, saved, { exact = false } = {}) {
  const round = rounder(exact);
  const [labels, scores] = parseScores(inputs.scores);
  const betas = saved.betas;
  const methods = { softmax: softmaxRow, sparsemax: sparsemaxRow, hardmax: hardmaxRow };
  const data = { labels, scores, betas: betas.slice(), entropy: {}, nonzero: {} };
  for (const [name, weigh] of Object.entries(methods)) {
    const rows = betas.map((beta) => weigh(scores.map((s) => beta * s)));
    if (name !== "hardmax") data[name] = round(rows);
    data.entropy[name] = round(rows.map(entropyOf));
    data.nonzero[name] = rows.map((row) => row.filter((w) => w > 0).length);
  }
  data.hardmax = round(hardmaxRow(scores));
  data.uniform_entropy = Math.log(scores.length);
  return data;
}

export const softHardUnit = {
  kind: "soft_hard",
  setup: softHardExplorer,
  pageCompute: (saved) => (saved.betas ? softHardData : null),
  adjustView: () => {},
};
