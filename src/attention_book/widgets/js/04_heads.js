// -- chapters 4 and 7: HeadViewer ---------------------------------------------------------
import { dataOf, make, select, shorten, textInput } from "./kit.js";
import { colourBar, heatmap, newPicture, wrapLines, writeText } from "./pictures.js";
import { WidgetInputError, pyRepr, pySplit, pyStrip, rounder } from "./python.js";
import { headSession, loadPageModel, weightLists } from "./onnx.js";
import { wordpieceSentence } from "./wordpiece.js";

// The hint under the head viewer's picture (both layouts); `every` > 1: the grid names every k-th token.
function headHint(every) {
  const named =
    every > 1
      ? `; in the grid every ${every === 2 ? "second" : `${every}th`} token is named, the others when pointed at`
      : "";
  return `rows: queries · columns: keys (point at or tap a cell or a token to follow it${named})`;
}

// The viewer's state: its frame, the sentence box, its menus, and `built`, the picture drawn for the
// current sentence, model shape and layout.
function headViewer(frame) {
  const { model } = frame;
  // The sentence box works on the website where the model was saved as ONNX (chapter 4) or is served beside
  // the page (chapter 7: kind "pretrained", loaded on the first sentence typed) and the browser runs
  // WebAssembly; without WebAssembly the note says what typing needs.
  const page = !frame.live && model.get("page_model") ? JSON.parse(model.get("page_model")) : null;
  const noWasm = Boolean(page) && typeof WebAssembly === "undefined";
  // A model the page cannot run may have saved the weights of its menu's sentences (page_examples): the menu
  // then works here, and typing a sentence of one's own needs a kernel. Chapter 7's menu draws them too.
  const examples = model.get("examples") || [];
  const menuOnly = !frame.live && !page && Boolean(model.get("page_examples"));
  const box = textInput(
    frame,
    "sentence",
    "sentence",
    model.get("inputs").sentence,
    noWasm
      ? "edit the sentence (typing here runs the model in the page, which needs WebAssembly, off in this browser)"
      : "edit the sentence",
    { offline: menuOnly || noWasm },
  );
  if (menuOnly) {
    frame.offlineNote =
      "On this page the menu's sentences were computed when the book was built: typing a sentence of " +
      "your own needs a kernel to run the model (open the chapter in Colab or Jupyter).";
  } else if (noWasm && model.get("page_examples")) {
    frame.offlineNote =
      "On this page the menu's sentences were computed when the book was built: typing a sentence of your " +
      "own runs the model in the page, which needs WebAssembly, off in this browser (or open the chapter in " +
      "Colab or Jupyter).";
  } else if (page && page.kind === "pretrained" && !noWasm) {
    frame.offlineNote =
      `Type a sentence of your own and this page runs ${page.name} on it; the first one loads the model ` +
      `(${page.megabytes} MB, once). The menu's sentences were computed when the book was built.`;
    // The model starts loading at the first key typed, not when the sentence is sent: the reader is typing.
    const loading = frame.errors.sentence;
    const hear = (text) => {
      if (loading.textContent && !loading.classList.contains("ab-busy")) return; // a message is shown
      loading.textContent = text;
      loading.classList.toggle("ab-busy", Boolean(text));
    };
    box.addEventListener("input", () => loadPageModel(page, hear).catch(() => {}), { once: true });
  }
  const exampleMenu = examples.length && frame.canSend ? examplesMenu(frame, examples, box) : null;
  const layerMenu = select(frame, "layer", "layer", [], frame.view.layer, (v) => frame.setView({ layer: v }));
  const headMenu = select(frame, "head", "head", [], frame.view.head, (v) => frame.setView({ head: v }));
  const viewer = { frame, examples, exampleMenu, layerMenu, headMenu, built: null };
  return () => drawHeads(viewer);
}

// The menu of example sentences: choosing one types it into the sentence box.
function examplesMenu(frame, examples, box) {
  return select(
    frame,
    "example",
    "or try",
    [["a sentence…", null], ...examples.map((s) => [shorten(s, 36), s])],
    null,
    (v) => {
      if (v === null) return;
      box.value = v;
      frame.send("sentence", v);
    },
  );
}

// Every head of one layer, `columns` a row, each heatmap in a square of side `panel`.
function headGrid(gridGroup, frame, { H, T, labels, columns, margin, panel, gap, rowPitch, cell, every, font }) {
  const gridRows = Math.ceil(H / columns);
  const grid = [];
  for (let h = 0; h < H; h += 1) {
    const r = Math.floor(h / columns);
    const c = h % columns;
    const x = margin + c * (panel + gap);
    const y = 40 + r * rowPitch;
    make("svg:text", { x: x + panel / 2, y: y - 4, "text-anchor": "middle", "font-size": 11 }, gridGroup, `head ${h}`);
    grid.push(
      heatmap(gridGroup, frame.colour, {
        x,
        y,
        cell,
        rows: T,
        cols: T,
        every,
        font,
        rowLabels: c === 0 ? labels : null,
        colLabels: r === gridRows - 1 || h + columns >= H ? labels : null,
      }),
    );
  }
  return grid;
}

function buildHeads(viewer, data) {
  const { frame } = viewer;
  const parts = frame.layout.narrow ? headsNarrow(frame, data) : headsWide(frame, data);
  viewer.built = { text: `${data.labels.join(" ")}|${data.num_layers}|${data.num_heads}`, ...parts };
  viewer.built.layout = frame.layout.key;
  viewer.layerMenu.fill(
    data.num_layers === 1
      ? [["0 (the model has one layer)", 0]]
      : Array.from({ length: data.num_layers }, (_, i) => [`layer ${i}`, i]),
    Math.min(frame.view.layer, data.num_layers - 1),
  );
  const heads = Array.from({ length: data.num_heads }, (_, h) => [`head ${h}`, h]);
  viewer.headMenu.fill([["all heads", "all"], ...heads], frame.view.head);
}

function headsWide(frame, data) {
  const T = data.labels.length;
  const H = data.num_heads;
  const labels = data.labels.map((l) => shorten(l, 10));
  const margin = 30 + 6.2 * Math.max(...labels.map((l) => l.length));
  const columns = Math.min(H, 4);
  const gap = 18;
  const width = 660;
  const panel = Math.min(170, (width - margin - 60 - (columns - 1) * gap) / columns);
  // Labels of at least 9 units (9 px or more in a desktop column): where a cell is smaller, every
  // k-th token is named and the others show when pointed at, as on a phone.
  const cell = panel / T;
  const every = cell * 0.9 >= 9 ? 1 : Math.ceil(10 / cell);
  const hintLines = wrapLines(headHint(every), width - 20, 11).length;
  const maps = 40 + Math.ceil(H / columns) * (panel + gap) + margin; // the grid with its labels; the hint below
  const height = maps + 14 * (hintLines - 1);
  const svg = newPicture(frame, width, height);
  const heading = make("svg:text", { x: 10, y: 18, "font-weight": "bold", "font-size": 13 }, svg, "");
  const gridGroup = make("svg:g", {}, svg);
  const font = every > 1 ? 9 : Math.min(11, cell * 0.9);
  const rowPitch = panel + gap;
  const grid = headGrid(gridGroup, frame, { H, T, labels, columns, margin, panel, gap, rowPitch, cell, every, font });
  // One head alone, in the same box (so the cell keeps its height).
  const singleGroup = make("svg:g", {}, svg);
  const singleCell = Math.min(maps - 40 - margin, width - margin - 80) / T;
  const single = heatmap(singleGroup, frame.colour, {
    ...{ x: margin, y: 40, cell: singleCell, rows: T, cols: T, rowLabels: labels, colLabels: labels },
    ...{ numbers: T <= 10 && singleCell >= 22, font: 11, every: Math.ceil(11 / singleCell) },
  });
  colourBar(svg, frame.colour, {
    x: width - 60,
    y: 40,
    height: Math.min(200, maps - 40 - margin),
    label: "attention weight",
  });
  writeText(
    make("svg:text", { x: 10, y: height - 8 - 14 * (hintLines - 1), "font-size": 11, fill: "#444" }, svg),
    headHint(every),
    width - 20,
  );
  return { heading, grid, gridGroup, single, singleGroup };
}

// A narrow screen: two heads a row, labels at 10 px (every k-th token's where the cells are
// smaller than a label; the rest show on pointing), the colour bar lying under the maps, the
// hint wrapped.
function headsNarrow(frame, data) {
  const T = data.labels.length;
  const H = data.num_heads;
  const W = frame.layout.width;
  const font = 10;
  const labels = data.labels.map((l) => shorten(l, 8));
  const longest = Math.max(...labels.map((l) => l.length));
  const margin = 8 + 6 * longest; // the row labels' width
  const depth = 16 + 4.9 * longest; // the slanted column labels' depth
  const columns = Math.min(H, 2);
  const gap = 14;
  const panel = (W - margin - 6 - (columns - 1) * gap) / columns;
  const cell = panel / T;
  const every = Math.ceil(11 / cell); // a label's pitch at least 11 units
  const rowPitch = panel + 18;
  const gridHeight = Math.ceil(H / columns) * rowPitch - 18 + depth;
  const side = W - margin - 6;
  const hint = wrapLines(headHint(every), W - 12, 11);
  const footerHeight = 40 + 14 * hint.length;
  const svg = newPicture(frame, W, 40 + Math.max(gridHeight, side + depth) + footerHeight);
  const heading = make("svg:text", { x: 6, y: 16, "font-weight": "bold", "font-size": 13 }, svg, "");
  const gridGroup = make("svg:g", {}, svg);
  const grid = headGrid(gridGroup, frame, { H, T, labels, columns, margin, panel, gap, rowPitch, cell, every, font });
  const singleGroup = make("svg:g", {}, svg);
  const singleCell = side / T;
  const single = heatmap(singleGroup, frame.colour, {
    ...{ x: margin, y: 40, cell: singleCell, rows: T, cols: T, rowLabels: labels, colLabels: labels, font },
    ...{ every: Math.ceil(11 / singleCell), numbers: T <= 10 && singleCell >= 22 },
  });
  // The colour bar and the hint, under whichever picture shows (drawHeads moves them and sets the height).
  const footer = make("svg:g", {}, svg);
  colourBar(footer, frame.colour, { x: margin, y: 6, width: Math.min(side - 100, 180), label: "attention weight" });
  writeText(make("svg:text", { x: 6, y: 50, "font-size": 11, fill: "#444" }, footer), hint.join(" "), W - 12);
  const bottom = { all: 40 + gridHeight, single: 40 + side + depth };
  const narrow = { svg, footer, footerHeight, bottom, width: W };
  return { heading, grid, gridGroup, single, singleGroup, narrow };
}

function drawHeads(viewer) {
  const { frame } = viewer;
  const { model } = frame;
  const data = dataOf(model);
  const stale = !viewer.built || viewer.built.text !== `${data.labels.join(" ")}|${data.num_layers}|${data.num_heads}`;
  if (stale || viewer.built.layout !== frame.layout.key) buildHeads(viewer, data);
  const { built } = viewer;
  const v = frame.view;
  const layer = Math.min(v.layer, data.num_layers - 1);
  const all = v.head === "all";
  built.gridGroup.setAttribute("visibility", all ? "visible" : "hidden");
  built.singleGroup.setAttribute("visibility", all ? "hidden" : "visible");
  if (built.narrow) {
    // the picture as tall as the maps shown
    const { svg, footer, footerHeight, bottom, width } = built.narrow;
    const top = all ? bottom.all : bottom.single;
    footer.setAttribute("transform", `translate(0 ${top})`);
    svg.setAttribute("viewBox", `0 0 ${width} ${top + footerHeight}`);
  }
  if (all) {
    data.weights[layer].forEach((matrix, h) => built.grid[h].set(matrix));
  } else {
    built.single.set(data.weights[layer][v.head]);
  }
  built.heading.textContent = `layer ${layer}, ${all ? `all ${data.num_heads} heads` : `head ${v.head}`}`;
  viewer.layerMenu.set(layer);
  viewer.headMenu.set(v.head);
  if (viewer.exampleMenu) {
    // the sentence shown, where it is one of the menu's
    const sentence = frame.live ? model.get("inputs").sentence : frame.inputs.sentence;
    viewer.exampleMenu.set(viewer.examples.includes(sentence) ? sentence : null);
  }
}

// -- chapter 4: attention_book.widgets.head_viewer (the sentence, on the website) -----------
// The viewer saved `page_model` (export_page_model): the model's encoder as ONNX, whose output
// is every layer's weights, and the word encoder's rules. A typed sentence is encoded here as
// word_encoder and HeadViewer._encode/_run encode and check it (the same messages, in the same
// order), the ONNX model runs in onnxruntime-web's WebAssembly build on one thread, and its
// weights are rounded as HeadViewer.compute rounds them. Checks answer at once; the model's
// answer comes back as a Promise (staticSend awaits it).
export function headTokens(text, page) {
  if (!pyStrip(text)) throw new WidgetInputError("the sentence is empty: type a few words and press Enter", "sentence");
  const rules = page.rules;
  const index = new Map(rules.words);
  const words = pySplit(rules.lowercase ? text.toLowerCase() : text); // str.lower(), str.split()
  if (!words.length)
    throw new WidgetInputError("the sentence is empty: type a few words separated by spaces", "sentence");
  const unknown = [...new Set(words)].filter((word) => !index.has(word));
  if (unknown.length) {
    throw new WidgetInputError(
      `unknown word${unknown.length > 1 ? "s" : ""} ${unknown.map((word) => pyRepr(word)).join(", ")}: ` +
        `the model only knows its vocabulary (${rules.known})`,
      "sentence",
    );
  }
  if (rules.max_len !== null && words.length > rules.max_len) {
    throw new WidgetInputError(
      `the sentence has ${words.length} words but the model reads at most ${rules.max_len}`,
      "sentence",
    );
  }
  if (words.length > page.max_tokens) {
    throw new WidgetInputError(
      `the sentence has ${words.length} tokens; this viewer shows at most ${page.max_tokens}`,
      "sentence",
    );
  }
  const ids = words.map((word) => index.get(word));
  const [low, high] = [Math.min(...ids), Math.max(...ids)];
  if (low < 0 || high >= page.vocab_size) {
    // the embedding's checks (transformer._Embedding)
    throw new WidgetInputError(
      `the model cannot read this sentence: token ids must lie in [0, ${page.vocab_size}) ` +
        `for this vocabulary, but range from ${low} to ${high}`,
      "sentence",
    );
  }
  if (ids.length > page.max_len) {
    throw new WidgetInputError(
      `the model cannot read this sentence: the sequence has ${ids.length} tokens ` +
        `but the model allows at most max_len=${page.max_len} positions`,
      "sentence",
    );
  }
  return { words, ids };
}
// HeadViewer.compute: every layer's and head's weights (layers x heads x T x T, rows = queries).
export function headData(inputs, page, { exact = false } = {}) {
  const { words, ids } = headTokens(inputs.sentence, page); // bad input: thrown here, at once
  const T = ids.length;
  return headSession(page).then(
    async ({ ort, session }) => {
      const tokens = new ort.Tensor(
        "int64",
        BigInt64Array.from(ids, (id) => BigInt(id)),
        [1, T],
      );
      const weights = weightLists((await session.run({ [page.input]: tokens }))[page.output]);
      const [L, H] = [weights.length, weights[0].length];
      return { labels: words, num_layers: L, num_heads: H, weights: rounder(exact)(weights, page.digits) };
    },
    (error) => {
      throw new WidgetInputError(
        `typing here runs the model in the page, but onnxruntime-web did not start: ${error.message}`,
        "sentence",
      );
    },
  );
}

// -- chapter 7: attention_book.widgets.pretrained_page (MiniLM, served beside the page) ----------------
// The viewer saved where the page finds its model (minilm_page_model): one script, added on the first
// sentence typed (onnx.js, loadPageModel), with the model as ONNX and the tokenizer's rules. A typed sentence
// is checked as HeadViewer._encode and PretrainedEncoder.encode_sentence check it (the same messages, in the
// same order: the empty one at once, the rest once the tokenizer is there), cut into word pieces
// (wordpiece.js), run, and its weights rounded as HeadViewer.compute rounds them.
const EMPTY = "the sentence is empty: type a few words and press Enter";
export function pretrainedTokens(text, rules, page) {
  if (!pyStrip(text)) throw new WidgetInputError(EMPTY, "sentence");
  const { labels, ids } = wordpieceSentence(text, rules);
  if (labels.length > page.max_tokens) {
    throw new WidgetInputError(
      `the sentence has ${labels.length} word pieces with [CLS] and [SEP], but at most ${page.max_tokens} fit; ` +
        "shorten it",
      "sentence",
    );
  }
  if (labels.length > page.viewer_tokens) {
    throw new WidgetInputError(
      `the sentence has ${labels.length} tokens; this viewer shows at most ${page.viewer_tokens}`,
      "sentence",
    );
  }
  return { labels, ids };
}
export function pretrainedData(inputs, page, { progress = () => {}, exact = false } = {}) {
  if (!pyStrip(inputs.sentence)) throw new WidgetInputError(EMPTY, "sentence");
  return loadPageModel(page, progress).then(
    async ({ ort, session, rules }) => {
      const { labels, ids } = pretrainedTokens(inputs.sentence, rules, page);
      const tokens = new ort.Tensor(
        "int64",
        BigInt64Array.from(ids, (id) => BigInt(id)),
        [1, ids.length],
      );
      const weights = weightLists((await session.run({ tokens })).weights); // tools/site/page_models.py's names
      return {
        labels,
        num_layers: weights.length,
        num_heads: weights[0].length,
        weights: rounder(exact)(weights, page.digits),
      };
    },
    (error) => {
      throw new WidgetInputError(
        `typing here runs the model in the page, but it did not load: ${error.message}`,
        "sentence",
      );
    },
  );
}

// The head viewer's answers saved for the website (page_examples: sentence -> what
// HeadViewer.compute sent for it): the menu's sentences only.
export function exampleData(answers) {
  return (inputs) => {
    if (!Object.hasOwn(answers, inputs.sentence)) {
      throw new WidgetInputError(
        "this page holds the weights of the menu's sentences only: typing a sentence of your own " +
          "needs a kernel (open the chapter in Colab or Jupyter)",
        "sentence",
      );
    }
    return answers[inputs.sentence];
  };
}

// The head viewer's model, saved as ONNX (absent: any other model; no WebAssembly: headViewer says so);
// a model too large for the page: the weights of the menu's sentences, computed when the book was built;
// chapter 7's, served beside the page: those, and any other sentence run in the page (`progress` hears
// the model load).
function headPageCompute(_saved, model) {
  const page = model.get("page_model") ? JSON.parse(model.get("page_model")) : null;
  const answers = model.get("page_examples") ? JSON.parse(model.get("page_examples")) : null;
  if (!page || typeof WebAssembly === "undefined") return answers ? exampleData(answers) : null;
  if (page.kind === "pretrained") {
    return (inputs, _data, progress) =>
      answers && Object.hasOwn(answers, inputs.sentence)
        ? answers[inputs.sentence]
        : pretrainedData(inputs, page, { progress });
  }
  return (inputs) => headData(inputs, page);
}

export const headUnit = {
  kind: "heads",
  setup: headViewer,
  pageCompute: headPageCompute,
  adjustView: () => {},
};
