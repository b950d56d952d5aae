// -- chapter 2: KeyValueExplorer ----------------------------------------------------------
import { dataOf, fixed, make, shorten, slider, textInput } from "./kit.js";
import { barChart, newPicture } from "./pictures.js";
import { WidgetInputError, formatShort, pyFloat, pyRepr, pySplit, pyStrip, rounder, softmaxRow } from "./python.js";

// The explorer's state: its frame, one slider per query component, the query box, and `built`.
function keyValueExplorer(frame) {
  const { model } = frame;
  const sliders = querySliders(frame);
  const text = textInput(frame, "query", "query", model.get("inputs").query, "type a query");
  if (!frame.canSend) {
    // the page holds the numbers along each component from the saved query, not every mix
    make(
      "span",
      { class: "ab-hint" },
      frame.controls,
      "On this page one component moves at a time: moving another puts the first back.",
    );
  }
  const explorer = { frame, sliders, text, built: null };
  return () => drawKeyValue(explorer);
}

function querySliders(frame) {
  const { model } = frame;
  const data0 = dataOf(model);
  return data0.query.map((_value, i) =>
    slider(frame, `query_${i}`, `query[${i}]`, {
      min: 0,
      max: data0.grid.length - 1,
      step: 1,
      value: data0.grid_index[i],
      show: (k) => fixed(dataOf(model).grid[k], 1),
      onInput: (k) => {
        // Only this component moves; the numbers along it were computed by the kernel.
        const moved = {};
        moved[i] = k;
        frame.setView({ moved });
      },
      onCommit: (k) => {
        if (frame.canSend) {
          const data = dataOf(model);
          const q = data.query.slice();
          q[i] = data.grid[k];
          frame.send("query", q.join(", "));
        }
      },
    }),
  );
}

function buildKeyValue(explorer, data) {
  const { frame } = explorer;
  const labels = data.key_labels.map((l) => shorten(l, 16));
  // Narrow: the sum under the bars (below their slanted labels) instead of beside them.
  const { narrow, width: W } = frame.layout;
  const sumX = narrow ? 6 : 390;
  const sumY = narrow ? 30 + 180 + 20 + 3.8 * Math.max(...labels.map((l) => l.length)) : 30;
  const svg = newPicture(frame, narrow ? W : 660, narrow ? sumY + 24 + 17 * data.values_list.length + 14 : 270);
  explorer.built = {
    keys: data.key_labels.join("|"),
    layout: frame.layout.key,
    sumX,
    heading: make("svg:text", { x: narrow ? 6 : 70, y: 16, "font-weight": "bold", "font-size": 13 }, svg, ""),
    bars: barChart(svg, {
      x: narrow ? 44 : 70,
      y: 30,
      width: narrow ? W - 52 : 280,
      height: 180,
      labels,
      yLabel: "attention weight",
    }),
    sum: make("svg:text", { x: sumX, y: sumY + 20, "font-size": 12, "font-family": "monospace" }, svg, ""),
  };
  make(
    "svg:text",
    { x: sumX, y: sumY, "font-weight": "bold", "font-size": 12 },
    svg,
    "returned value = Σ weight × value",
  );
}

// The numbers shown: the saved query's, or those along the one component moved (view.moved).
function keyValueShown(data, moved) {
  const axis = Object.keys(moved).length ? Number(Object.keys(moved)[0]) : null;
  const shown = { axis, weights: data.weights, value: data.value, scores: data.scores, q: data.query.slice() };
  if (axis !== null) {
    const k = moved[axis];
    shown.weights = data.along[axis].weights[k];
    shown.value = data.along[axis].values[k];
    shown.scores = data.along[axis].scores[k];
    shown.q[axis] = data.grid[k];
  }
  return shown;
}

function drawKeyValue(explorer) {
  const { frame } = explorer;
  const data = dataOf(frame.model);
  const stale = !explorer.built || explorer.built.keys !== data.key_labels.join("|");
  if (stale || explorer.built.layout !== frame.layout.key) buildKeyValue(explorer, data);
  const { built } = explorer;
  const { axis, weights, value, scores, q } = keyValueShown(data, frame.view.moved || {});
  // On the website only one component can move from the saved query: put the others back.
  explorer.sliders.forEach((s, i) => {
    if (i !== axis) s.set(data.grid_index[i]);
  });
  built.bars.set(
    weights,
    scores.map((s) => `s=${fixed(s, 1)}`),
    weights.map((w) => frame.colour(w)),
  );
  built.heading.textContent = `query [${q.map((x) => fixed(x, 1)).join(", ")}]`;
  while (built.sum.firstChild) built.sum.firstChild.remove();
  data.values_list.forEach((vec, j) => {
    make(
      "svg:tspan",
      { x: built.sumX, dy: j ? 17 : 0 },
      built.sum,
      `${fixed(weights[j], 3)} × [${vec.map((x) => fixed(x, 0)).join(", ")}]`,
    );
  });
  make(
    "svg:tspan",
    { x: built.sumX, dy: 24, "font-weight": "bold" },
    built.sum,
    `= [${value.map((x) => fixed(x, 2)).join(", ")}]`,
  );
  if (!explorer.text.matches(":focus")) explorer.text.value = q.map((x) => fixed(x, 1)).join(", ");
}

// -- chapter 2: attention_book.widgets.key_value_explorer ---------------------------------
export function parseQuery(text, size, limit) {
  // parse_query
  const cleaned = pySplit(pyStrip(pyStrip(text), "[]()").replace(/,/g, " "));
  if (!cleaned.length)
    throw new WidgetInputError(
      `type ${size} numbers separated by commas, for example "${Array(size).fill("0").join(", ")}"`,
    );
  const numbers = cleaned.map((word) => {
    const parsed = pyFloat(word);
    if (parsed === null)
      throw new WidgetInputError(`${pyRepr(word)} is not a number; type ${size} numbers separated by commas`);
    if (!Number.isFinite(parsed.value)) throw new WidgetInputError(`${pyRepr(word)} is not a finite number`);
    return parsed.value;
  });
  if (numbers.length !== size) {
    throw new WidgetInputError(
      `the keys have ${size} components, so the query needs ${size} numbers, but ${numbers.length} were given`,
    );
  }
  numbers.forEach((number, index) => {
    if (Math.abs(number) > limit) {
      throw new WidgetInputError(
        `component ${index + 1} is ${formatShort(number)}, but the sliders go from ${formatShort(-limit)} to ${formatShort(limit)}`,
      );
    }
  });
  return numbers;
}

// KeyValueExplorer.compute: the lookup (attention_book.attention.scaled_dot_product_attention
// of float32 numbers) for the typed query and along each component's slider, from the keys and
// values the kernel saved in the payload.
export function keyValueData(inputs, saved, { exact = false } = {}) {
  const round = rounder(exact);
  const keys = saved.keys;
  const size = keys[0].length;
  const query = parseQuery(inputs.query, size, saved.limit);
  const scale = Math.sqrt(size);
  function lookup(q) {
    const scores = keys.map((key) => key.reduce((sum, k, c) => sum + q[c] * k, 0) / scale);
    const weights = softmaxRow(scores);
    const value = saved.values[0].map((_, c) => weights.reduce((sum, w, j) => sum + w * saved.values[j][c], 0));
    return { scores, weights, value };
  }
  const grid = [];
  for (let k = 0; -saved.limit + 0.5 * k <= saved.limit; k += 1) grid.push(-saved.limit + 0.5 * k);
  const point = query.map(Math.fround);
  const typed = lookup(point);
  const along = point.map((_, i) => {
    const sweep = grid.map((g) => lookup(point.map((v, c) => (c === i ? g : v))));
    return {
      weights: round(sweep.map((s) => s.weights)),
      values: round(
        sweep.map((s) => s.value),
        3,
      ),
      scores: round(
        sweep.map((s) => s.scores),
        3,
      ),
    };
  });
  const nearest = (q) => grid.reduce((best, g, k) => (Math.abs(g - q) < Math.abs(grid[best] - q) ? k : best), 0);
  return {
    query,
    key_labels: saved.key_labels.slice(),
    values_list: saved.values_list,
    scores: round(typed.scores, 3),
    weights: round(typed.weights),
    value: round(typed.value, 3),
    grid: round(grid, 2),
    grid_index: point.map(nearest),
    along,
    keys: saved.keys,
    values: saved.values,
    limit: saved.limit,
  };
}

export const keyValueUnit = {
  kind: "key_value",
  setup: keyValueExplorer,
  pageCompute: (saved) => (saved.keys && saved.values && saved.limit ? keyValueData : null),
  adjustView: (frame) => {
    frame.view.moved = {}; // KeyValueExplorer.adjust_view
  },
};
