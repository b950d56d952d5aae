// -- chapter 6: DecodingStepper ------------------------------------------------------------
import { button, dataOf, fixed, make, select, shorten, slider, textInput } from "./kit.js";
import { heatmap, newPicture, writeText } from "./pictures.js";
import { pyRepr, pySplit, pyStrip, rounder, softmaxRow, WidgetInputError } from "./python.js";
import { headSession } from "./onnx.js";

// The stepper's state: its frame, its controls, and `built`, the picture drawn for the current decoding's
// shape (decodingLayoutOf) and layout.
function decodingStepper(frame) {
  const { model } = frame;
  const move = (delta) => () => {
    const data = dataOf(model);
    frame.setView({ step: Math.min(data.output.length, Math.max(1, frame.view.step + delta)) });
  };
  button(frame, "back", "◀ back", move(-1));
  const step = slider(frame, "step", "step", {
    min: 1,
    max: dataOf(model).output.length,
    step: 1,
    value: frame.view.step,
    show: (v) => v,
    onInput: (v) => frame.setView({ step: v }),
  });
  button(frame, "next", "next ▶", move(+1));
  const layerMenu = select(frame, "layer", "layer", [], frame.view.layer, (v) => frame.setView({ layer: v }));
  const headMenu = select(frame, "head", "head", [], frame.view.head, (v) => frame.setView({ head: v }));
  const noWasm = !frame.live && model.get("page_model") && typeof WebAssembly === "undefined"; // see headViewer
  const source = textInput(
    frame,
    "source",
    "source",
    model.get("inputs").source,
    noWasm
      ? "decode another source (typing here runs the model in the page, which needs WebAssembly, off in this browser)"
      : "decode another source",
  );

  const stepper = { frame, step, layerMenu, headMenu, source, built: null };
  return () => drawDecoding(stepper);
}

// The picture's layout: a new source of the same length, with labels as wide, reuses it.
function decodingLayoutOf(data) {
  return JSON.stringify([
    data.output.length,
    data.source.length,
    data.vocabulary,
    Math.max(...data.fed.map((f, i) => `${f} → ${data.output[i]}`.length)),
  ]);
}

function buildDecoding(stepper, data) {
  const { frame } = stepper;
  const parts = frame.layout.narrow ? decodingNarrow(frame, data) : decodingWide(frame, data);
  stepper.built = { layout: decodingLayoutOf(data) + frame.layout.key, ...parts };
  fillDecodingControls(stepper, data);
}

// One bar per token of the vocabulary, named on its left (wide layout).
function wideProbabilityBars(svg, vocabulary, { barsX, barHeight }) {
  return vocabulary.map((word, k) => {
    make(
      "svg:text",
      {
        x: barsX - 4,
        y: 50 + k * barHeight + barHeight * 0.75,
        "text-anchor": "end",
        "font-size": Math.min(10, barHeight),
        "data-pitch": barHeight.toFixed(2),
      },
      svg,
      shorten(word, 6),
    );
    return make(
      "svg:rect",
      { x: barsX, y: 50 + k * barHeight + 1, height: barHeight - 2, width: 0, fill: "#56b4e9" },
      svg,
    );
  });
}

function decodingWide(frame, data) {
  const L = data.output.length;
  const T = data.source.length;
  const cell = Math.min(24, 200 / Math.max(L, T));
  const V = data.vocabulary.length;
  const barHeight = Math.min(14, Math.max(10, (L * cell + 40) / V)); // its label at 10 units: 9 px or more on a desktop
  const height = Math.max(50 + L * cell + 80, 50 + barHeight * V + 30);
  const svg = newPicture(frame, 660, height);
  const rowLabels = data.fed.map(() => "");
  const heading = make("svg:text", { x: 10, y: 18, "font-weight": "bold", "font-size": 13 }, svg, "");
  const labelWidth = 7 * Math.max(...data.fed.map((f, i) => `${f} → ${data.output[i]}`.length));
  const crossX = 12 + labelWidth;
  const selfX = crossX + T * cell + 24;
  const cross = heatmap(svg, frame.colour, {
    x: crossX,
    y: 50,
    cell,
    rows: L,
    cols: T,
    rowLabels,
    colLabels: data.source,
    xTitle: "cross-attention to the source",
    numbers: cell >= 22,
  });
  const selfMap = heatmap(svg, frame.colour, {
    x: selfX,
    y: 50,
    cell,
    rows: L,
    cols: L,
    colLabels: data.fed,
    xTitle: "causal self-attention",
  });
  const barsX = selfX + L * cell + 60;
  make(
    "svg:text",
    { x: barsX - 40, y: 44, "font-size": 11, "data-room": (660 - barsX + 36).toFixed(2) },
    svg,
    "next token (orange: chosen)",
  );
  const barWidth = Math.max(60, 650 - barsX);
  const probBars = wideProbabilityBars(svg, data.vocabulary, { barsX, barHeight });
  const note = make("svg:text", { x: 10, y: height - 6, "font-size": 11, fill: "#7a5b00" }, svg, "");
  return {
    heading,
    cross,
    selfMap,
    probBars,
    barWidth,
    note,
    wrap: null,
  };
}

// A narrow screen: the cross-attention, the self-attention under it (its rows named too), then
// the most likely next tokens (all of them when there are few), each with its probability.
function decodingNarrow(frame, data) {
  const L = data.output.length;
  const T = data.source.length;
  const W = frame.layout.width;
  const rowLabels = data.fed.map(() => "");
  const labelWidth = 6.2 * Math.max(...data.fed.map((f, i) => `${f} → ${data.output[i]}`.length));
  const x = 10 + labelWidth;
  const cell = Math.min(26, (W - x - 6) / Math.max(L, T));
  const slant = (words) => 8 + 4.9 * Math.max(...words.map((w) => String(w).length));
  const crossY = 16 + 15 * 3 + 10; // under a heading of up to three lines
  const selfY = crossY + L * cell + slant(data.source) + 24;
  const barsY = selfY + L * cell + slant(data.fed) + 30;
  const shown = data.vocabulary.length <= 12 ? data.vocabulary.length : 8;
  const barsX = 10 + 6.2 * Math.max(...data.vocabulary.map((w) => shorten(w, 6).length));
  const noteY = barsY + shown * 16 + 16;
  const svg = newPicture(frame, W, noteY + 22); // room for a note of two lines
  const heading = make("svg:text", { x: 6, y: 16, "font-weight": "bold", "font-size": 12 }, svg, "");
  const cross = heatmap(svg, frame.colour, {
    x,
    y: crossY,
    cell,
    rows: L,
    cols: T,
    rowLabels,
    colLabels: data.source,
    xTitle: "cross-attention to the source",
    numbers: cell >= 22,
    font: 10,
  });
  const selfMap = heatmap(svg, frame.colour, {
    x,
    y: selfY,
    cell,
    rows: L,
    cols: L,
    rowLabels: rowLabels.slice(),
    colLabels: data.fed,
    xTitle: "causal self-attention",
    font: 10,
  });
  const title =
    shown < data.vocabulary.length
      ? `next token: the ${shown} most likely of ${data.vocabulary.length} (orange: chosen)`
      : "next token (orange: chosen)";
  make("svg:text", { x: 6, y: barsY - 8, "font-size": 11 }, svg, title);
  const barWidth = W - barsX - 40;
  const probBars = Array.from({ length: shown }, (_, k) => ({
    label: make("svg:text", { x: barsX - 4, y: barsY + k * 16 + 11, "text-anchor": "end", "font-size": 10 }, svg, ""),
    bar: make("svg:rect", { x: barsX, y: barsY + k * 16 + 2, height: 12, width: 0, fill: "#56b4e9" }, svg),
    value: make("svg:text", { x: barsX + 4, y: barsY + k * 16 + 11, "font-size": 10 }, svg, ""),
  }));
  const note = make("svg:text", { x: 6, y: noteY, "font-size": 11, fill: "#7a5b00" }, svg, "");
  return {
    heading,
    cross,
    selfMap,
    probBars,
    barWidth,
    note,
    wrap: W - 12,
    barsX,
  };
}

function fillDecodingControls(stepper, data) {
  const { frame } = stepper;
  const L = data.output.length;
  stepper.step.setRange(1, L);
  stepper.layerMenu.fill(
    data.num_layers === 1
      ? [["0 (the model has one layer)", 0]]
      : Array.from({ length: data.num_layers }, (_, i) => [`layer ${i}`, i]),
    Math.min(frame.view.layer, data.num_layers - 1),
  );
  stepper.headMenu.fill(
    [["average of heads", -1], ...Array.from({ length: data.num_heads }, (_, h) => [`head ${h}`, h])],
    frame.view.head,
  );
}

function drawDecoding(stepper) {
  const { frame } = stepper;
  const data = dataOf(frame.model);
  if (!stepper.built || stepper.built.layout !== decodingLayoutOf(data) + frame.layout.key)
    buildDecoding(stepper, data);
  const { built } = stepper;
  if (built.data !== data) {
    // new numbers: the source letters under the cross-attention, the text box
    data.source.forEach((token, j) => built.cross.colLabel(j, token));
    stepper.source.value = data.source.join(" ");
    built.data = data;
  }
  const v = frame.view;
  const L = data.output.length;
  const s = Math.min(Math.max(1, v.step), L);
  const layer = Math.min(v.layer, data.num_layers - 1);
  const headKey = v.head === -1 ? "average" : String(v.head);
  const cross = data.cross[layer][headKey];
  const selfRows = data.self[layer][headKey];
  // Rows of steps not decoded yet stay empty, and so do their labels.
  built.cross.set(cross.map((row, i) => (i < s ? row : null)));
  built.selfMap.set(selfRows.map((row, i) => (i < s ? row.map((x, j) => (j <= i ? x : null)) : null)));
  for (let i = 0; i < L; i += 1) {
    built.cross.rowLabel(i, i < s ? `${data.fed[i]} → ${data.output[i]}` : "");
    if (built.wrap) built.selfMap.rowLabel(i, i < s ? `${data.fed[i]} → ${data.output[i]}` : "");
    built.selfMap.colLabel(i, i < s ? data.fed[i] : ""); // tokens not fed yet stay unnamed
  }
  built.cross.mark(s - 1);
  built.selfMap.mark(s - 1);
  drawNextToken(built, data, { s, L, layer, head: v.head });
  stepper.step.set(s);
  stepper.layerMenu.set(layer);
  stepper.headMenu.set(v.head);
}

// The probabilities of the next token at step s, the heading and the note.
function drawNextToken(built, data, { s, L, layer, head }) {
  const probabilities = data.probabilities[s - 1];
  const chosen = data.chosen[s - 1];
  if (built.wrap) {
    // the most likely tokens, most likely first
    const order = probabilities.map((_p, k) => k).sort((a, b) => probabilities[b] - probabilities[a] || a - b);
    built.probBars.forEach((row, n) => {
      const k = order[n];
      row.label.textContent = shorten(data.vocabulary[k], 6);
      row.bar.setAttribute("width", probabilities[k] * built.barWidth);
      row.bar.setAttribute("fill", k === chosen ? "#e69f00" : "#56b4e9");
      row.value.setAttribute("x", built.barsX + probabilities[k] * built.barWidth + 4);
      row.value.textContent = fixed(probabilities[k], 2);
    });
  } else {
    built.probBars.forEach((bar, k) => {
      bar.setAttribute("width", probabilities[k] * built.barWidth);
      bar.setAttribute("fill", k === chosen ? "#e69f00" : "#56b4e9");
    });
  }
  writeText(
    built.heading,
    `step ${s} of ${L}: fed '${data.fed[s - 1]}', writes '${data.output[s - 1]}' (layer ${layer}, ${head === -1 ? "average of heads" : `head ${head}`})`,
    built.wrap,
  );
  writeText(
    built.note,
    data.stopped_at_limit
      ? `Stopped after ${L} tokens, the most this decoder writes (max_len = ${L}), without writing EOS.`
      : "",
    built.wrap,
  );
}

// -- chapter 6: attention_book.widgets.decoding_stepper (the source, on the website) --------
// The stepper saved `page_model` (export_page_model): the encoder-decoder as ONNX, whose outputs
// are the logits and every decoder layer's self- and cross-attention weights for a target of the
// decoder's every position. parseSource reads the typed source as parse_source does (the same
// messages); decodingData runs greedy decoding around the model (BOS and the tokens written so
// far, PAD after them: the decoder is causal, so a row does not see what follows it), and sends
// what DecodingStepper.compute sends, rounded as it rounds.
const pyListRepr = (items) => `[${items.map((item) => pyRepr(item)).join(", ")}]`;
export function parseSource(text, page) {
  const symbols = page.symbols;
  const maxLen = page.max_source;
  const known = new Set(symbols);
  if (symbols.includes(" ") && symbols.every((symbol) => [...symbol].length === 1)) {
    // _reads_characters
    let characters = [...pyStrip(text)];
    if (characters.length > 2 && characters.filter((_, i) => i % 2 === 1).every((c) => c === " ")) {
      characters = characters.filter((_, i) => i % 2 === 0); // "3 /   3" is "3/ 3"
    }
    if (!characters.length)
      throw new WidgetInputError(
        'type a date as you would write it, for example "tuesday 3rd of march 1998"',
        "source",
      );
    const unknown = [...new Set(characters)].filter((c) => !known.has(c));
    if (unknown.length)
      throw new WidgetInputError(
        `unknown character ${pyRepr(unknown[0])}; this model knows ${pyRepr(symbols.join(""))}`,
        "source",
      );
    if (characters.length > maxLen)
      throw new WidgetInputError(
        `the model reads at most ${maxLen} characters, but ${characters.length} were given`,
        "source",
      );
    return characters;
  }
  const example = symbols.slice(0, Math.min(4, symbols.length)).join(" ");
  let words = pySplit(text.replaceAll(",", " "));
  if (!words.length)
    throw new WidgetInputError(
      `type a source sequence, symbols separated by spaces, for example "${example}"`,
      "source",
    );
  if (words.length === 1 && !known.has(words[0]) && symbols.every((symbol) => [...symbol].length === 1))
    words = [...words[0]]; // "CAFB"
  if (symbols.every((symbol) => symbol.toUpperCase() === symbol))
    words = words.map((word) => (known.has(word.toUpperCase()) ? word.toUpperCase() : word));
  const specials = words.filter((word) => page.specials.names.includes(word));
  if (specials.length)
    throw new WidgetInputError(
      `${pyRepr(specials[0])} is a special token that the model adds itself; type only symbols from ${pyListRepr(symbols)}`,
      "source",
    );
  const unknown = words.filter((word) => !known.has(word));
  if (unknown.length)
    throw new WidgetInputError(
      `unknown token ${pyRepr(unknown[0])}; this model knows the symbols ${symbols.join(" ")}`,
      "source",
    );
  if (words.length > maxLen)
    throw new WidgetInputError(`the model reads at most ${maxLen} tokens, but ${words.length} were given`, "source");
  return words;
}

export function decodingData(inputs, page, { exact = false } = {}) {
  const labels = parseSource(inputs.source, page); // bad input: thrown here, at once
  const tokens = [...page.specials.names, ...page.symbols];
  const index = new Map(tokens.map((token, i) => [token, i])); // Vocabulary.encode: the last of equal labels
  const round = rounder(exact);
  return headSession(page).then(
    async ({ ort, session }) => {
      const source = new ort.Tensor(
        "int64",
        BigInt64Array.from(labels, (label) => BigInt(index.get(label))),
        [1, labels.length],
      );
      const { written, last } = await greedyDecode(ort, session, { source, page });
      return decodingAnswer(last, written, { labels, tokens, page, round });
    },
    (error) => {
      throw new WidgetInputError(
        `typing here runs the model in the page, but onnxruntime-web did not start: ${error.message}`,
        "source",
      );
    },
  );
}

// Greedy decoding: BOS and the tokens written so far, PAD after them, until EOS or max_len tokens;
// the ids written and the model's last outputs (every position's logits and weights).
async function greedyDecode(ort, session, { source, page }) {
  const { bos, eos, pad } = page.specials;
  const written = [];
  let last = null;
  for (let k = 0; k < page.max_len; k += 1) {
    const fed = [bos, ...written];
    const target = new BigInt64Array(page.target_len).fill(BigInt(pad));
    fed.forEach((id, i) => {
      target[i] = BigInt(id);
    });
    last = await session.run({ source, target: new ort.Tensor("int64", target, [1, page.target_len]) });
    const V = last.logits.dims[1];
    const row = last.logits.data.subarray((fed.length - 1) * V, fed.length * V);
    let best = 0;
    for (let v = 1; v < V; v += 1) if (row[v] > row[best]) best = v; // argmax: the first of equal scores
    written.push(best);
    if (best === eos) break;
  }
  return { written, last };
}

// What DecodingStepper.compute sends, from the decoding's last outputs, rounded as it rounds.
function decodingAnswer(last, written, { labels, tokens, page, round }) {
  const { bos, eos } = page.specials;
  const L = written.length;
  const V = last.logits.dims[1];
  const [layers, heads, T] = last.self.dims;
  const Tin = labels.length;
  const probabilities = Array.from({ length: L }, (_, t) => {
    const row = Array.from(last.logits.data.subarray(t * V, (t + 1) * V));
    return softmaxRow(row);
  });
  // rows 0..L-1 of one layer's and head's (T, cols) matrix, their first `take` columns
  const pick = (tensor, cols, take, l, h) =>
    Array.from({ length: L }, (_, i) => {
      const start = ((l * heads + h) * T + i) * cols;
      return Array.from(tensor.data.subarray(start, start + take));
    });
  const perLayer = (tensor, cols, take) =>
    Array.from({ length: layers }, (_, l) => {
      const rows = Array.from({ length: heads }, (_, h) => pick(tensor, cols, take, l, h));
      const entry = {
        average: round(
          rows[0].map((row, i) => row.map((_, j) => rows.reduce((sum, m) => sum + m[i][j], 0) / heads)),
          3,
        ),
      };
      rows.forEach((matrix, h) => {
        entry[String(h)] = round(matrix, 3);
      });
      return entry;
    });
  return {
    source: labels,
    output: written.map((id) => tokens[id]),
    fed: [bos, ...written.slice(0, -1)].map((id) => tokens[id]),
    vocabulary: tokens,
    num_layers: layers,
    num_heads: heads,
    cross: perLayer(last.cross, Tin, Tin),
    self: perLayer(last.self, T, L),
    probabilities: round(probabilities, 4),
    chosen: written,
    stopped_at_limit: !written.includes(eos),
    max_len: page.max_len,
  };
}

// The decoding stepper's model, saved as ONNX (as the head viewer's): the source typed on the website
// runs it in the page (no WebAssembly: the source box says so).
function decodingPageCompute(_saved, model) {
  const page = model.get("page_model");
  if (!page || typeof WebAssembly === "undefined") return null;
  const parsedPage = JSON.parse(page);
  return (inputs) => decodingData(inputs, parsedPage);
}

// DecodingStepper.adjust_view: a new source shows its whole decoding.
function decodingAdjustView(frame, data, value) {
  const steps = data.output.length;
  frame.view.step = value !== frame.shownSource ? steps : Math.min(Math.max(1, frame.view.step), steps);
  frame.shownSource = value;
}

export const decodingUnit = {
  kind: "decoding",
  setup: decodingStepper,
  pageCompute: decodingPageCompute,
  adjustView: decodingAdjustView,
};
