// -- chapter 5: PositionalEncodingExplorer -------------------------------------------------
import { dataOf, fixed, make, select, slider } from "./kit.js";
import { newPicture, writeText } from "./pictures.js";
import { WidgetInputError, pyFloat, pyGeneral, pyInt, pyRepr, rounder } from "./python.js";

// A rows x cols picture, one pixel per cell (scaled up crisply by the SVG), as a data URL.
function imageOf(rows, cols, valueAt, colour, lo, hi) {
  const canvas = document.createElement("canvas");
  canvas.width = cols;
  canvas.height = rows;
  const context = canvas.getContext("2d");
  const image = context.createImageData(cols, rows);
  const table = colour.table;
  const scale = 255 / (hi - lo);
  for (let i = 0; i < rows; i += 1) {
    for (let j = 0; j < cols; j += 1) {
      const step = Math.max(0, Math.min(255, Math.round((valueAt(i, j) - lo) * scale)));
      const k = 4 * (i * cols + j);
      image.data[k] = table[3 * step];
      image.data[k + 1] = table[3 * step + 1];
      image.data[k + 2] = table[3 * step + 2];
      image.data[k + 3] = 255;
    }
  }
  context.putImageData(image, 0, 0);
  return canvas.toDataURL();
}

// The explorer's state: its frame, its controls, and `parts`, the picture drawn for the current layout.
function positionalExplorer(frame) {
  const explorer = { frame, ...positionalControls(frame), parts: null };
  return () => drawPositional(explorer);
}

function positionalControls(frame) {
  const { model } = frame;
  const data0 = dataOf(model);
  const send = (name) => (value) => frame.canSend && frame.send(name, String(value));
  const dModel = slider(frame, "d_model", "d_model", {
    min: 2,
    max: data0.max_d_model,
    step: 2,
    value: data0.d_model,
    show: (v) => v,
    onCommit: send("d_model"),
  });
  const length = slider(frame, "length", "positions", {
    min: 2,
    max: data0.max_length,
    step: 1,
    value: frame.view.length,
    show: (v) => v,
    onInput: (v) => frame.setView({ length: v }),
  });
  const base = slider(frame, "base", "base", {
    min: 1,
    max: 6,
    step: 0.25,
    value: Math.log10(data0.base),
    show: (v) => Math.round(10 ** v).toLocaleString("en"),
    onCommit: (v) => frame.canSend && frame.send("base", String(10 ** v)),
  });
  if (!frame.canSend) {
    dModel.input.disabled = true;
    base.input.disabled = true;
    frame.offline.push("change d_model or the base");
  }
  const measure = select(
    frame,
    "measure",
    "compare by",
    data0.measures.map((m) => [m, m]),
    frame.view.measure,
    (m) => frame.setView({ measure: m }),
  );
  return { dModel, length, base, measure };
}

// A narrow screen: the table, then the similarity under it; the titles wrap.
function positionalNarrow(frame) {
  const W = frame.layout.width;
  const side = Math.min(W - 40, 260);
  const simY = 46 + side + 24 + 44;
  const centre = 30 + side / 2;
  const svg = newPicture(frame, W, simY + side + 24 + 34);
  return {
    wrap: W - 12,
    table: make(
      "svg:image",
      { x: 30, y: 46, width: side, height: side, preserveAspectRatio: "none", style: "image-rendering: pixelated" },
      svg,
    ),
    similarity: make(
      "svg:image",
      {
        x: 30,
        y: simY,
        width: side,
        height: side,
        preserveAspectRatio: "none",
        style: "image-rendering: pixelated",
      },
      svg,
    ),
    tableTitle: make("svg:text", { x: 6, y: 14, "font-size": 12, "font-weight": "bold" }, svg, ""),
    simTitle: make("svg:text", { x: 6, y: simY - 28, "font-size": 12, "font-weight": "bold" }, svg, ""),
    tableAxes: make(
      "svg:text",
      { x: centre, y: 46 + side + 16, "text-anchor": "middle", "font-size": 11 },
      svg,
      "dimension (sin even, cos odd) →",
    ),
    simAxes: make(
      "svg:text",
      { x: centre, y: simY + side + 16, "text-anchor": "middle", "font-size": 11 },
      svg,
      "position j →   (rows: position i)",
    ),
    rowsLabel: make(
      "svg:text",
      {
        x: 20,
        y: 46 + side / 2,
        transform: `rotate(-90 20 ${46 + side / 2})`,
        "text-anchor": "middle",
        "font-size": 11,
      },
      svg,
      "position →",
    ),
    scale: make("svg:text", { x: 6, y: simY + side + 36, "font-size": 11 }, svg, ""),
  };
}

function positionalWide(frame) {
  const svg = newPicture(frame, 660, 330);
  return {
    wrap: null,
    table: make(
      "svg:image",
      { x: 60, y: 40, width: 250, height: 250, preserveAspectRatio: "none", style: "image-rendering: pixelated" },
      svg,
    ),
    similarity: make(
      "svg:image",
      { x: 380, y: 40, width: 200, height: 200, preserveAspectRatio: "none", style: "image-rendering: pixelated" },
      svg,
    ),
    tableTitle: make(
      "svg:text",
      { x: 185, y: 30, "text-anchor": "middle", "font-size": 12, "font-weight": "bold", "data-room": 285 },
      svg,
      "",
    ),
    simTitle: make(
      "svg:text",
      { x: 480, y: 30, "text-anchor": "middle", "font-size": 12, "font-weight": "bold", "data-room": 215 },
      svg,
      "",
    ),
    tableAxes: make(
      "svg:text",
      { x: 185, y: 308, "text-anchor": "middle", "font-size": 11 },
      svg,
      "dimension (sin even, cos odd) →",
    ),
    simAxes: make(
      "svg:text",
      { x: 480, y: 258, "text-anchor": "middle", "font-size": 11 },
      svg,
      "position j →   (rows: position i)",
    ),
    rowsLabel: make(
      "svg:text",
      { x: 40, y: 165, transform: "rotate(-90 40 165)", "text-anchor": "middle", "font-size": 11 },
      svg,
      "position →",
    ),
    scale: make("svg:text", { x: 380, y: 280, "font-size": 11 }, svg, ""),
  };
}

function drawPositional(explorer) {
  const { frame } = explorer;
  const data = dataOf(frame.model);
  if (!explorer.parts || explorer.parts.layout !== frame.layout.key) {
    explorer.parts = frame.layout.narrow ? positionalNarrow(frame) : positionalWide(frame);
    explorer.parts.layout = frame.layout.key;
  }
  const { parts } = explorer;
  const L = Math.min(frame.view.length, data.max_length);
  const pe = data.pe;
  const byOffset = data.similarity[frame.view.measure];
  const lo = Math.min(...byOffset.slice(0, L));
  const hi = Math.max(...byOffset.slice(0, L));
  if (parts.tableData !== data || parts.tableLength !== L) {
    // the table does not change with the measure
    parts.table.setAttribute(
      "href",
      imageOf(L, data.d_model, (i, j) => pe[i][j], frame.colour, -1, 1),
    );
    parts.tableData = data;
    parts.tableLength = L;
  }
  parts.similarity.setAttribute(
    "href",
    imageOf(L, L, (i, j) => byOffset[Math.abs(i - j)], frame.colour, lo, hi === lo ? lo + 1 : hi),
  );
  writeText(parts.tableTitle, `PE: ${L} positions × d_model = ${data.d_model} (colours −1 … 1)`, parts.wrap);
  writeText(parts.simTitle, `${frame.view.measure} of PE[i] and PE[j]`, parts.wrap);
  writeText(parts.scale, `colours from ${fixed(lo, 2)} (dark) to ${fixed(hi, 2)} (light)`, parts.wrap);
  explorer.length.set(L);
  explorer.measure.set(frame.view.measure);
  explorer.dModel.set(data.d_model);
  explorer.base.set(Math.log10(data.base));
}

// -- chapter 5: attention_book.widgets.positional_explorer --------------------------------
const BASE_RANGE = [10, 1000000];

export function positionalSettings(inputs, maxDModel = 256) {
  // PositionalEncodingExplorer._settings
  const whole = pyInt(inputs.d_model);
  if (whole === null)
    throw new WidgetInputError(`d_model must be a whole number, but ${pyRepr(inputs.d_model)} was given`, "d_model");
  const dModel = whole.value;
  if (dModel % 2 !== 0 || !(dModel >= 2 && dModel <= maxDModel)) {
    throw new WidgetInputError(
      `d_model must be an even number from 2 to ${maxDModel} (each frequency fills a sine and a cosine column), but it is ${whole.text}`,
      "d_model",
    );
  }
  const parsed = pyFloat(inputs.base);
  if (parsed === null)
    throw new WidgetInputError(`the base must be a number, but ${pyRepr(inputs.base)} was given`, "base");
  const base = parsed.value;
  if (!(Number.isFinite(base) && BASE_RANGE[0] * 0.999 <= base && base <= BASE_RANGE[1] * 1.001)) {
    throw new WidgetInputError(`the base must lie between 10 and 1,000,000, but it is ${pyGeneral(base)}`, "base");
  }
  return [dModel, base];
}

// PositionalEncodingExplorer.compute, with attention_book.positional.sinusoidal_encoding
// (computed in float64, stored in float32) and sinusoidal_frequencies.
export function positionalData(inputs, saved, { exact = false } = {}) {
  const round = rounder(exact);
  const positions = saved.max_length;
  const [dModel, base] = positionalSettings(inputs, saved.max_d_model);
  const frequencies = [];
  for (let i = 0; i < dModel; i += 2) frequencies.push(Math.exp((-Math.log(base) * i) / dModel));
  const table = [];
  for (let p = 0; p < positions; p += 1) {
    const row = new Array(dModel);
    frequencies.forEach((w, k) => {
      row[2 * k] = Math.fround(Math.sin(p * w));
      row[2 * k + 1] = Math.fround(Math.cos(p * w));
    });
    table.push(row);
  }
  const dot = table.map((row) => row.reduce((sum, v, k) => sum + v * table[0][k], 0)); // PE[0] . PE[j]
  const norms = table.map((row) => Math.sqrt(row.reduce((sum, v) => sum + v * v, 0)));
  const cosine = dot.map((d, j) => d / (norms[0] * norms[j]));
  return {
    d_model: dModel,
    base,
    max_length: positions,
    max_d_model: saved.max_d_model,
    measures: saved.measures.slice(),
    pe: round(table, 3),
    similarity: { "dot product": round(dot, 3), cosine: round(cosine, 4) },
    wavelengths: [(2 * Math.PI) / frequencies[0], (2 * Math.PI) / frequencies[frequencies.length - 1]],
  };
}

export const positionalUnit = {
  kind: "positional",
  setup: positionalExplorer,
  pageCompute: (saved) => (saved.max_length && saved.measures ? positionalData : null),
  adjustView: () => {},
};
