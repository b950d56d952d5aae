// The pictures and controls of attention_book's widgets (chapters 1-7), drawn by the browser.
//
// The kernel (Python, torch) computes the numbers and sends them in the widget's `data`;
// this file draws them as SVG and handles every control that only changes what is shown
// (temperature, query, mask, layer, head, step, hover) without asking the kernel. Controls
// that need the model (a new sentence, source or query text) write the widget's `inputs`,
// and the kernel answers with new `data` or with an `error` shown next to that control.
//
// One file, no imports: Python serves it as anywidget's ES module (`_esm`, with an
// `export default` appended) in Jupyter, VS Code and Colab; on the book's website the
// widget state saved in each chapter carries the same source, and the page has no
// kernel (window.__attentionBookStaticPage, set by tools/site/widgets_offline.js): there the
// controls whose numbers are plain arithmetic (chapter 1's sentence, chapter 2's query,
// chapter 3's scores, chapter 5's d_model and base) are computed by this file (STATIC_COMPUTE,
// mirroring the Python widgets), chapter 4's sentence and chapter 6's source run the chapter's
// model, saved as ONNX, with onnxruntime-web (headData, decodingData), and the other model-bound
// one (chapter 7's sentence, a model too large for the page) is disabled with a note, its menu
// of sentences drawing the weights saved when the book was built (exampleData).

const SVG_NS = "http://www.w3.org/2000/svg";

function make(tag, attributes, parent, text) {
  const svg = tag.startsWith("svg:");
  const node = svg ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, String(value));
  }
  if (text !== undefined) node.textContent = String(text);
  if (parent) parent.appendChild(node);
  return node;
}

function fixed(value, digits) {
  return value === null || value === undefined || !isFinite(value) ? "–" : Number(value).toFixed(digits);
}

function shorten(label, limit) {
  label = String(label);
  return label.length <= limit ? label : label.slice(0, limit - 1) + "…";
}

// -- colours: the book's one attention colour map, sent by Python as hex stops -----------
function makePalette(stops) {
  const rgb = stops.map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
  function mix(value) {
    const x = Math.min(1, Math.max(0, value)) * (rgb.length - 1);
    const i = Math.min(rgb.length - 2, Math.floor(x));
    const f = x - i;
    return rgb[i].map((v, k) => Math.round(v + f * (rgb[i + 1][k] - v)));
  }
  function colour(value) {
    if (value === null || value === undefined || !isFinite(value)) return "#e4e4e4";
    const c = mix(value);
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }
  // 256 steps as bytes, for pictures painted pixel by pixel (imageOf).
  colour.table = new Uint8Array(256 * 3);
  for (let k = 0; k < 256; k += 1) colour.table.set(mix(k / 255), 3 * k);
  return colour;
}

function inkOn(value) {
  return value !== null && value > 0.6 ? "#000" : "#fff"; // light cells (high weights) take black text
}

const STYLE = `
.ab-widget { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 13px; color: #222;
  border: 1px solid #ddd; border-radius: 6px; padding: 8px 10px; max-width: 760px; background: #fff; }
.ab-title { font-weight: 600; margin-bottom: 4px; }
.ab-controls { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: center; margin-bottom: 4px; }
.ab-control { display: inline-flex; align-items: center; gap: 5px; max-width: 100%; }
.ab-control > label { white-space: nowrap; }
.ab-control select { min-width: 0; max-width: 100%; text-overflow: ellipsis; }
.ab-control input[type=range] { width: 150px; }
.ab-control input[type=text] { width: 220px; }
.ab-control .ab-readout { min-width: 3.2em; font-variant-numeric: tabular-nums; }
.ab-error { color: #b00020; font-size: 12px; }
.ab-error:empty { display: none; }
/* The picture is drawn to the width it gets (its viewBox scales). Under NARROW_PX each widget draws
   a layout made for that width (panels stacked, 1 unit = 1 px or more, labels of 10 px); fitLabels()
   still enlarges any label that would be drawn under 9 px where it has room, and hides the numbers
   inside matrix cells that would, so nothing is cut and nothing needs scrolling sideways. */
.ab-picture { position: relative; }
.ab-picture svg { width: 100%; height: auto; display: block; }
.ab-picture text.ab-too-small { display: none; }
.ab-picture text.ab-label-rest:not(.ab-label-shown) { display: none; }
.ab-picture text { font-family: inherit; }
.ab-stale svg { opacity: 0.35; }
.ab-stale-note { display: none; position: absolute; top: 4px; right: 6px; background: #fff3cd; color: #7a5b00;
  border: 1px solid #e0c96b; border-radius: 4px; padding: 1px 6px; font-size: 12px; }
.ab-stale .ab-stale-note { display: block; }
.ab-footer { display: flex; flex-wrap: wrap; gap: 4px 14px; color: #555; font-size: 12px; margin-top: 2px; }
.ab-note, .ab-hint { color: #555; font-size: 12px; }
.ab-note:empty { display: none; }
`;

function addStyle() {
  if (document.getElementById("attention-book-widget-style")) return;
  make("style", { id: "attention-book-widget-style" }, document.head, STYLE);
}

// -- controls ------------------------------------------------------------------------------
function control(frame, name, label) {
  const wrapper = make("span", { class: "ab-control", "data-control": name }, frame.controls);
  if (label) make("label", {}, wrapper, label);
  const error = make("span", { class: "ab-error", "data-error-for": name });
  frame.errors[name] = error;
  return { wrapper, error };
}

function placeError(wrapper, error) {
  wrapper.after(error);
}

function slider(frame, name, label, { min, max, step, value, show, onInput, onCommit }) {
  const { wrapper, error } = control(frame, name, label);
  const input = make("input", { type: "range", min, max, step, value, name }, wrapper);
  input.value = value;
  const readout = make("span", { class: "ab-readout" }, wrapper, show(value));
  placeError(wrapper, error);
  input.addEventListener("input", () => {
    readout.textContent = show(Number(input.value));
    if (onInput) onInput(Number(input.value));
  });
  if (onCommit) input.addEventListener("change", () => onCommit(Number(input.value)));
  return {
    input,
    set(v) {
      input.value = v;
      readout.textContent = show(Number(v));
    },
    setRange(lo, hi) {
      input.min = lo;
      input.max = hi;
    },
  };
}

function select(frame, name, label, options, value, onChange) {
  // One option: a label instead of a menu with nothing to choose.
  const { wrapper, error } = control(frame, name, label);
  let menu = null;
  let only = null;
  function fill(list, current) {
    wrapper.querySelectorAll("select, .ab-only").forEach((node) => node.remove());
    if (list.length === 1) {
      only = make("span", { class: "ab-only", "data-name": name }, wrapper, list[0][0]);
      menu = null;
      return;
    }
    menu = make("select", { name }, wrapper);
    for (const [text, v] of list) make("option", { value: JSON.stringify(v) }, menu, text);
    menu.value = JSON.stringify(current);
    menu.addEventListener("change", () => onChange(JSON.parse(menu.value)));
  }
  fill(options, value);
  placeError(wrapper, error);
  return {
    get menu() {
      return menu;
    },
    set(v) {
      if (menu) menu.value = JSON.stringify(v);
    },
    fill,
  };
}

function checkbox(frame, name, label, value, onChange) {
  const { wrapper, error } = control(frame, name);
  const input = make("input", { type: "checkbox", name, id: `${frame.id}-${name}` }, wrapper);
  input.checked = value;
  make("label", { for: `${frame.id}-${name}` }, wrapper, label);
  placeError(wrapper, error);
  input.addEventListener("change", () => onChange(input.checked));
  return { input };
}

function button(frame, name, text, onClick) {
  const b = make("button", { type: "button", name }, frame.controls, text);
  b.addEventListener("click", onClick);
  return b;
}

// A control that needs the kernel (a new sentence, source, query text): on the website it
// is disabled and a note says where it works, unless this file computes its numbers there
// (frame.canSend: see STATIC_COMPUTE).
function textInput(frame, name, label, value, what, { offline = false } = {}) {
  const { wrapper, error } = control(frame, name, label);
  const input = make("input", { type: "text", name, spellcheck: "false" }, wrapper);
  input.value = value;
  placeError(wrapper, error);
  if (!frame.canSend || offline) {
    input.disabled = true;
    frame.offline.push(what);
  } else {
    input.addEventListener("change", () => frame.send(name, input.value));
  }
  return input;
}

// -- drawing pieces ------------------------------------------------------------------------
// Labels are never drawn under MIN_LABEL_PX screen pixels where they have room: when the picture is
// scaled down (a phone), a label whose declared size would fall under it gets a larger size in the
// picture's units; a matrix's row and column labels grow only as far as their row or column pitch
// (data-pitch) allows, so they never overlap; a label that would then run out of the picture (or
// out of the width data-room its panel gives it) shrinks back until it fits; a number inside a matrix cell that would fall under it is hidden (the cell's
// colour stays).
const MIN_LABEL_PX = 9;
function fitLabels(svg) {
  if (!svg || !svg.viewBox || !svg.viewBox.baseVal || !svg.viewBox.baseVal.width) return;
  const shown = svg.getBoundingClientRect().width;
  if (!shown) return;  // not laid out yet (a hidden tab): the resize observer calls again
  const box = svg.viewBox.baseVal;
  const scale = shown / box.width;
  const floor = MIN_LABEL_PX / scale;  // the smallest legible size, in the picture's units
  for (const text of svg.querySelectorAll("text")) {
    const declared = parseFloat(text.getAttribute("font-size")) || 12;
    if (text.classList.contains("ab-cell-number")) {
      text.classList.toggle("ab-too-small", declared < floor - 0.01);
      continue;
    }
    if (declared >= floor - 0.01) {
      if (text.style.fontSize) text.style.removeProperty("font-size");
      continue;
    }
    const pitch = parseFloat(text.dataset.pitch);
    let size = Number.isFinite(pitch) ? Math.max(declared, Math.min(floor, pitch)) : floor;
    text.style.fontSize = `${Math.ceil(size * 100) / 100}px`;
    if (!text.getAttribute("transform") && size > declared) {
      const bounds = text.getBBox();
      const room = parseFloat(text.dataset.room);  // the width a centred panel title may take
      const over = Math.max(bounds.x + bounds.width - (box.x + box.width), box.x - bounds.x,
        Number.isFinite(room) ? bounds.width - room : 0);
      if (over > 0 && bounds.width > 0) {
        size = Math.max(declared, size * (1 - over / bounds.width));
        text.style.fontSize = `${Math.floor(size * 100) / 100}px`;
      }
    }
  }
}

// A new picture is drawn detached and put in place whole by placePicture (redraw, after draw()):
// one change to the page instead of one per rectangle. A page's MutationObserver sees every change
// (the website's theme loads Font Awesome's, which watches the whole document): chapter 7's
// twelve heads, about 6,000 rectangles, took 0.4 s to appear when added one by one.
function newPicture(frame, width, height) {
  const svg = make("svg:svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "font-size": 12 });
  frame.svg = svg;
  frame.unplaced = svg;
  return svg;
}

function placePicture(frame) {
  if (!frame.unplaced) return;
  frame.picture.querySelectorAll("svg").forEach((node) => node.remove());
  frame.picture.prepend(frame.unplaced);
  frame.unplaced = null;
}

// -- the picture's layout: wide (a desktop column) or made for a narrow screen (a phone) -----
// Wide: every widget draws a fixed layout 660 units across, which the viewBox scales to the box.
// Under NARROW_PX the widget draws another layout, as many units across as the box has CSS pixels
// (rounded down to 8, so a unit is never drawn under 1 px): its panels stand one under another,
// long lines wrap, and a label declared at 10 units is drawn at 10 px or more. render() rebuilds
// the picture when the box's width crosses into another layout (frame.layout.key).
const NARROW_PX = 600;  // a phone, or a tablet upright; a desktop column gives about 650
function pictureLayout(frame) {
  const px = frame.picture.clientWidth;  // 0 while hidden (a closed tab): the wide layout until it shows
  if (!px || px >= NARROW_PX) return { narrow: false, width: 660, key: "wide" };
  const width = Math.max(240, 8 * Math.floor(px / 8));
  return { narrow: true, width, key: `narrow-${width}` };
}

// Words of `text` on lines of at most `width` units at `font` (a character estimated at 0.58 font,
// 0.64 in bold, 0.62 in monospace).
function wrapLines(text, width, font, { monospace, bold } = {}) {
  const perLine = Math.max(8, Math.floor(width / (font * (monospace ? 0.62 : bold ? 0.64 : 0.58))));
  const lines = [];
  for (const word of String(text).split(" ")) {
    const last = lines.length ? lines[lines.length - 1] : null;
    if (last !== null && (last + " " + word).length <= perLine) lines[lines.length - 1] = last + " " + word;
    else lines.push(word);
  }
  return lines;
}

// Writes `text` into an SVG text element, wrapped onto lines (tspans) when `width` is given.
function writeText(node, text, width) {
  if (!width) {
    node.textContent = text;
    return 1;
  }
  while (node.firstChild) node.firstChild.remove();
  const font = parseFloat(node.getAttribute("font-size")) || 12;
  const lines = wrapLines(text, width, font, {
    monospace: node.getAttribute("font-family") === "monospace", bold: node.getAttribute("font-weight") === "bold" });
  lines.forEach((line, k) => make("svg:tspan", { x: node.getAttribute("x"), dy: k ? (font * 1.25).toFixed(1) : 0 }, node, line));
  return lines.length;
}

// A heatmap of SVG rectangles: set(matrix) recolours; rows are queries, columns keys.
// Hovering a cell or a label highlights its row and column (the rest fades). With `every` = k > 1
// (cells too small for a legible label each) only every k-th row and column is labelled; the
// others' labels show while their row or column is pointed at.
function heatmap(parent, colour, { x, y, cell, rows, cols, rowLabels, colLabels, xTitle, yTitle, numbers, font, onRowClick, every }) {
  const g = make("svg:g", { class: "ab-heatmap" }, parent);
  font = font || 11;
  every = every || 1;
  const rest = (k) => (k % every ? "ab-label-rest" : null);
  const rects = [];
  const texts = [];
  for (let i = 0; i < rows; i += 1) {
    rects.push([]);
    texts.push([]);
    for (let j = 0; j < cols; j += 1) {
      const r = make("svg:rect", { x: x + j * cell, y: y + i * cell, width: cell, height: cell, fill: "#e4e4e4", "data-row": i, "data-col": j }, g);
      rects[i].push(r);
      if (numbers) {
        texts[i].push(make("svg:text", { x: x + (j + 0.5) * cell, y: y + (i + 0.5) * cell + font * 0.35, "text-anchor": "middle", "font-size": Math.min(font, cell * 0.36), "pointer-events": "none", class: "ab-cell-number" }, g, ""));
      }
    }
  }
  const rowText = (rowLabels || []).map((label, i) =>
    make("svg:text", { x: x - 4, y: y + (i + 0.5) * cell + font * 0.35, "text-anchor": "end", "font-size": font, "data-row": i, "data-pitch": (cell * 0.95 * every).toFixed(2), class: rest(i) ? "ab-row-label ab-label-rest" : "ab-row-label", style: onRowClick ? "cursor:pointer" : "" }, g, label));
  const colText = (colLabels || []).map((label, j) => {
    const cx = x + (j + 0.5) * cell;
    const cy = y + rows * cell + 4;
    return make("svg:text", { x: cx, y: cy, transform: `rotate(-55 ${cx} ${cy})`, "text-anchor": "end", "dominant-baseline": "hanging", "font-size": font, "data-col": j, "data-pitch": (cell * 0.8 * every).toFixed(2), class: rest(j) }, g, label);
  });
  if (xTitle) make("svg:text", { x: x + (cols * cell) / 2, y: y - 6, "text-anchor": "middle", "font-size": font, "data-room": (cols * cell + 16).toFixed(2) }, g, xTitle);
  if (yTitle) {
    const tx = x - 4 - Math.max(0, ...(rowLabels || [""]).map((l) => String(l).length)) * font * 0.58 - 8;
    const ty = y + (rows * cell) / 2;
    make("svg:text", { x: tx, y: ty, transform: `rotate(-90 ${tx} ${ty})`, "text-anchor": "middle", "font-size": font }, g, yTitle);
  }
  const outline = make("svg:rect", { x, y, width: cols * cell, height: cell, fill: "none", stroke: "#d62728", "stroke-width": 2.5, visibility: "hidden" }, g);
  function focus(row, col) {
    for (let i = 0; i < rows; i += 1) {
      for (let j = 0; j < cols; j += 1) {
        const on = row === null || i === row || j === col;
        rects[i][j].setAttribute("opacity", on ? 1 : 0.3);
      }
    }
    rowText.forEach((t, i) => t.setAttribute("font-weight", i === row ? "bold" : "normal"));
    colText.forEach((t, j) => t.setAttribute("font-weight", j === col ? "bold" : "normal"));
    if (every > 1) {
      rowText.forEach((t, i) => t.classList.toggle("ab-label-shown", i === row));
      colText.forEach((t, j) => t.classList.toggle("ab-label-shown", j === col));
    }
  }
  g.addEventListener("mouseover", (event) => {
    const target = event.target;
    const row = target.hasAttribute("data-row") ? Number(target.getAttribute("data-row")) : null;
    const col = target.hasAttribute("data-col") ? Number(target.getAttribute("data-col")) : null;
    if (row !== null || col !== null) focus(row, col === null ? row : col);
  });
  g.addEventListener("mouseleave", () => focus(null, null));
  if (onRowClick) rowText.forEach((t, i) => t.addEventListener("click", () => onRowClick(i)));
  return {
    set(matrix) {
      for (let i = 0; i < rows; i += 1) {
        for (let j = 0; j < cols; j += 1) {
          const v = matrix[i] ? matrix[i][j] : null;
          rects[i][j].setAttribute("fill", colour(v));
          rects[i][j].setAttribute("data-value", v === null || v === undefined ? "" : String(v));  // the number drawn (tests read it)
          if (numbers) texts[i][j].textContent = v === null || v === undefined ? "" : fixed(v, 2);
          if (numbers) texts[i][j].setAttribute("fill", inkOn(v));
        }
      }
    },
    mark(row) {
      if (row === null || row === undefined) {
        outline.setAttribute("visibility", "hidden");
      } else {
        outline.setAttribute("visibility", "visible");
        outline.setAttribute("y", y + row * cell);
      }
    },
    rowLabel(i, text) {
      if (rowText[i]) rowText[i].textContent = text;
    },
    colLabel(j, text) {
      if (colText[j]) colText[j].textContent = text;
    },
  };
}

// A colour bar for weights 0..1: upright `height` tall, or lying `width` wide (a narrow layout).
function colourBar(parent, colour, { x, y, height, width, label }) {
  const g = make("svg:g", {}, parent);
  const steps = 20;
  if (width) {
    for (let k = 0; k < steps; k += 1) {
      make("svg:rect", { x: x + (width * k) / steps, y, width: width / steps + 0.5, height: 10, fill: colour(k / (steps - 1)) }, g);
    }
    for (const v of [0, 0.5, 1]) make("svg:text", { x: x + width * v, y: y + 23, "text-anchor": "middle", "font-size": 10 }, g, v.toFixed(1));
    if (label) make("svg:text", { x: x + width + 8, y: y + 9, "font-size": 10 }, g, label);
    return;
  }
  for (let k = 0; k < steps; k += 1) {
    make("svg:rect", { x, y: y + (height * k) / steps, width: 10, height: height / steps + 0.5, fill: colour(1 - k / (steps - 1)) }, g);
  }
  for (const v of [0, 0.5, 1]) make("svg:text", { x: x + 14, y: y + height * (1 - v) + 4, "font-size": 10 }, g, v.toFixed(1));
  if (label) {
    const tx = x + 40;
    const ty = y + height / 2;
    make("svg:text", { x: tx, y: ty, transform: `rotate(-90 ${tx} ${ty})`, "text-anchor": "middle", "font-size": 11 }, g, label);
  }
}

// Vertical bars with an axis 0..1: set(values, labelsAbove, colours).
function barChart(parent, { x, y, width, height, labels, yLabel, font }) {
  font = font || 11;
  const g = make("svg:g", {}, parent);
  const n = labels.length;
  const slot = width / n;
  const top = y + 16; // room for the labels written above the bars
  const plot = height - 16;
  make("svg:line", { x1: x, y1: y + height, x2: x + width, y2: y + height, stroke: "#333" }, g);
  make("svg:line", { x1: x, y1: top, x2: x, y2: y + height, stroke: "#333" }, g);
  for (const v of [0, 0.5, 1]) {
    const ty = y + height - v * plot;
    make("svg:line", { x1: x - 4, y1: ty, x2: x, y2: ty, stroke: "#333" }, g);
    make("svg:text", { x: x - 6, y: ty + 4, "text-anchor": "end", "font-size": 10 }, g, v.toFixed(1));
  }
  if (yLabel) {
    const tx = x - 30;
    const ty = y + height / 2;
    make("svg:text", { x: tx, y: ty, transform: `rotate(-90 ${tx} ${ty})`, "text-anchor": "middle", "font-size": font }, g, yLabel);
  }
  const bars = [];
  const above = [];
  labels.forEach((label, j) => {
    const bx = x + j * slot + slot * 0.15;
    bars.push(make("svg:rect", { x: bx, y: y + height, width: slot * 0.7, height: 0, stroke: "#000", "stroke-width": 0.8, "data-col": j }, g));
    above.push(make("svg:text", { x: bx + slot * 0.35, y: y + height - 3, "text-anchor": "middle", "font-size": Math.min(10, font) }, g, ""));
    const cx = bx + slot * 0.35;
    const cy = y + height + 5;
    const rotate = n > 6 || Math.max(...labels.map((l) => String(l).length)) * font * 0.6 > slot;
    make("svg:text", { x: cx, y: cy, transform: rotate ? `rotate(-35 ${cx} ${cy})` : null, "text-anchor": rotate ? "end" : "middle", "dominant-baseline": "hanging", "font-size": font }, g, label);
  });
  return {
    set(values, texts, fills, strokes) {
      values.forEach((v, j) => {
        const h = Math.max(0, Math.min(1, v || 0)) * plot;
        bars[j].setAttribute("y", y + height - h);
        bars[j].setAttribute("height", h);
        bars[j].setAttribute("fill", fills[j]);
        bars[j].setAttribute("stroke", strokes ? strokes[j][0] : "#000");
        bars[j].setAttribute("stroke-width", strokes ? strokes[j][1] : 0.8);
        above[j].setAttribute("y", y + height - h - 3);
        above[j].textContent = texts ? texts[j] : "";
      });
    },
  };
}

// -- chapter 1: AttentionExplorer --------------------------------------------------------
function attentionExplorer(frame) {
  const { model } = frame;
  let built = null;
  let picture = null;
  const view = frame.view;
  const temperature = slider(frame, "temperature", "temperature τ", {
    min: 0, max: dataOf(model).temperatures.length - 1, step: 1, value: view.temperature,
    show: (i) => fixed(dataOf(model).temperatures[i], 2),
    onInput: (i) => frame.setView({ temperature: i }),
  });
  const query = select(frame, "query", "query token", [], view.query, (q) => frame.setView({ query: q }));
  checkbox(frame, "scaled", "divide scores by √d_k", view.scaled, (v) => frame.setView({ scaled: v }));
  checkbox(frame, "causal", "causal (look back only)", view.causal, (v) => frame.setView({ causal: v }));
  const sentence = textInput(frame, "sentence", "sentence", model.get("inputs").sentence, "edit the sentence");

  function build(data) {
    const T = data.tokens.length;
    const labels = data.tokens.map((t) => shorten(t, 8));
    const explain = "bars: weights a_j of the query's row; above each bar its scaled score s_j / τ";
    const onRowClick = (i) => frame.setView({ query: i });
    const { narrow, width: W } = frame.layout;
    if (narrow) {  // heading, bars, then the matrix under them, then the output
      const lines = wrapLines(explain, W - 12, 11);
      const barsY = 52 + 14 * lines.length;  // under a heading of up to two lines
      const labelWidth = 6.4 * Math.max(...labels.map((l) => l.length));
      const cell = Math.min(36, (W - labelWidth - 16) / T);
      const mapX = labelWidth + 10;
      const mapY = barsY + 150 + 12 + 4.9 * Math.max(...labels.map((l) => l.length)) + 26;
      const below = mapY + T * cell + 8 + 4.9 * Math.max(...labels.map((l) => l.length));
      const outputLines = wrapLines(`output h = Σ_j a_j x_j = [${data.outputs[0][0][0][0].map(() => "-0.00").join(", ")}]`, W - 12, 11, { monospace: true }).length;
      const svg = newPicture(frame, W, below + 56 + 14 * outputLines);
      const heading = make("svg:text", { x: 6, y: 14, "font-weight": "bold", "font-size": 12 }, svg, "");
      writeText(make("svg:text", { x: 6, y: 48, "font-size": 11, fill: "#444" }, svg), explain, W - 12);
      const bars = barChart(svg, { x: 44, y: barsY, width: W - 52, height: 150, labels, yLabel: "attention weight a_j" });
      const map = heatmap(svg, frame.colour, { x: mapX, y: mapY, cell, rows: T, cols: T, rowLabels: labels, colLabels: labels, xTitle: "attention matrix A (keys →)", font: 10, onRowClick });
      colourBar(svg, frame.colour, { x: mapX, y: below + 6, width: Math.min(T * cell, 160), label: "weight" });
      const output = make("svg:text", { x: 6, y: below + 48, "font-size": 11, "font-family": "monospace" }, svg, "");
      built = { tokens: data.tokens.join(" "), layout: frame.layout.key, bars, map, heading, output, wrap: W - 12 };
    } else {
      const svg = newPicture(frame, 660, 330);
      const heading = make("svg:text", { x: 70, y: 16, "font-weight": "bold", "font-size": 13 }, svg, "");
      make("svg:text", { x: 70, y: 34, "font-size": 11, fill: "#444" }, svg, explain);
      const bars = barChart(svg, { x: 70, y: 44, width: 300, height: 200, labels, yLabel: "attention weight a_j" });
      const cell = Math.min(26, 190 / T);
      const map = heatmap(svg, frame.colour, {
        x: 470, y: 60, cell, rows: T, cols: T, rowLabels: labels, colLabels: labels, xTitle: "attention matrix A (keys →)",
        onRowClick,
      });
      colourBar(svg, frame.colour, { x: 470 + T * cell + 8, y: 60, height: T * cell, label: "" });
      const output = make("svg:text", { x: 70, y: 312, "font-size": 12, "font-family": "monospace" }, svg, "");
      built = { tokens: data.tokens.join(" "), layout: frame.layout.key, bars, map, heading, output, wrap: null };
    }
    query.fill(data.tokens.map((t, i) => [`${i + 1}: ${t}`, i]), Math.min(view.query, T - 1));
    temperature.setRange(0, data.temperatures.length - 1);
    sentence.value = data.tokens.join(" ");
  }

  return function draw() {
    const data = dataOf(model);
    if (!built || built.tokens !== data.tokens.join(" ") || built.layout !== frame.layout.key) build(data);
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
    writeText(built.heading, `query '${data.tokens[q]}' · τ = ${fixed(tau, 2)} · ${v.scaled ? "÷√d_k" : "unscaled"}${v.causal ? " · causal" : ""}`, built.wrap);
    const h = data.outputs[s][c][v.temperature][q];
    writeText(built.output, `output h = Σ_j a_j x_j = [${h.map((x) => fixed(x, 2)).join(", ")}]`, built.wrap);
    query.set(q);
    temperature.set(v.temperature);
  };
}

// -- chapter 2: KeyValueExplorer ----------------------------------------------------------
function keyValueExplorer(frame) {
  const { model } = frame;
  let built = null;
  const data0 = dataOf(model);
  const sliders = data0.query.map((value, i) =>
    slider(frame, `query_${i}`, `query[${i}]`, {
      min: 0, max: data0.grid.length - 1, step: 1, value: data0.grid_index[i],
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
    }));
  const text = textInput(frame, "query", "query", model.get("inputs").query, "type a query");
  if (!frame.canSend) {  // the page holds the numbers along each component from the saved query, not every mix
    make("span", { class: "ab-hint" }, frame.controls,
      "On this page one component moves at a time: moving another puts the first back.");
  }

  function build(data) {
    const labels = data.key_labels.map((l) => shorten(l, 16));
    // Narrow: the sum under the bars (below their slanted labels) instead of beside them.
    const { narrow, width: W } = frame.layout;
    const sumX = narrow ? 6 : 390;
    const sumY = narrow ? 30 + 180 + 20 + 3.8 * Math.max(...labels.map((l) => l.length)) : 30;
    const svg = newPicture(frame, narrow ? W : 660, narrow ? sumY + 24 + 17 * data.values_list.length + 14 : 270);
    built = {
      keys: data.key_labels.join("|"),
      layout: frame.layout.key,
      sumX,
      heading: make("svg:text", { x: narrow ? 6 : 70, y: 16, "font-weight": "bold", "font-size": 13 }, svg, ""),
      bars: barChart(svg, { x: narrow ? 44 : 70, y: 30, width: narrow ? W - 52 : 280, height: 180, labels, yLabel: "attention weight" }),
      sum: make("svg:text", { x: sumX, y: sumY + 20, "font-size": 12, "font-family": "monospace" }, svg, ""),
    };
    make("svg:text", { x: sumX, y: sumY, "font-weight": "bold", "font-size": 12 }, svg, "returned value = Σ weight × value");
  }

  return function draw() {
    const data = dataOf(model);
    if (!built || built.keys !== data.key_labels.join("|") || built.layout !== frame.layout.key) build(data);
    const moved = frame.view.moved || {};
    const axis = Object.keys(moved).length ? Number(Object.keys(moved)[0]) : null;
    let weights = data.weights;
    let value = data.value;
    let scores = data.scores;
    const q = data.query.slice();
    if (axis !== null) {
      const k = moved[axis];
      weights = data.along[axis].weights[k];
      value = data.along[axis].values[k];
      scores = data.along[axis].scores[k];
      q[axis] = data.grid[k];
    }
    // On the website only one component can move from the saved query: put the others back.
    sliders.forEach((s, i) => {
      if (i !== axis) s.set(data.grid_index[i]);
    });
    built.bars.set(weights, scores.map((s) => `s=${fixed(s, 1)}`), weights.map((w) => frame.colour(w)));
    built.heading.textContent = `query [${q.map((x) => fixed(x, 1)).join(", ")}]`;
    while (built.sum.firstChild) built.sum.firstChild.remove();
    data.values_list.forEach((vec, j) => {
      make("svg:tspan", { x: built.sumX, dy: j ? 17 : 0 }, built.sum, `${fixed(weights[j], 3)} × [${vec.map((x) => fixed(x, 0)).join(", ")}]`);
    });
    make("svg:tspan", { x: built.sumX, dy: 24, "font-weight": "bold" }, built.sum, `= [${value.map((x) => fixed(x, 2)).join(", ")}]`);
    if (!text.matches(":focus")) text.value = q.map((x) => fixed(x, 1)).join(", ");
  };
}

// -- chapter 3: SoftHardExplorer ----------------------------------------------------------
function softHardExplorer(frame) {
  const { model } = frame;
  let built = null;
  const beta = slider(frame, "beta", "inverse temperature β", {
    min: 0, max: dataOf(model).betas.length - 1, step: 1, value: frame.view.beta,
    show: (i) => fixed(dataOf(model).betas[i], 2),
    onInput: (i) => frame.setView({ beta: i }),
  });
  textInput(frame, "scores", "scores", model.get("inputs").scores, "edit the scores");
  const methods = [["softmax", "softmax(βs)"], ["sparsemax", "sparsemax(βs)"], ["hardmax", "hardmax(s)"]];

  function build(data) {
    const labels = data.labels.map((l) => shorten(l, 8));
    // Wide: the three bar charts side by side, the entropy plot under them. Narrow: the three
    // charts one under another (title left, entropy and count right), then the entropy plot,
    // its legend under it.
    const { narrow, width: W } = frame.layout;
    const slant = 4 * Math.max(...labels.map((l) => l.length));  // the depth of the slanted bar labels
    const panelHeight = 20 + 110 + 18 + slant;
    const svg = narrow ? newPicture(frame, W, 3 * panelHeight + 240) : newPicture(frame, 660, 400);
    const panels = methods.map(([key, name], m) => (narrow ? {
      key,
      title: make("svg:text", { x: 6, y: 14 + m * panelHeight, "font-size": 12, "font-weight": "bold" }, svg, name),
      info: make("svg:text", { x: W - 4, y: 14 + m * panelHeight, "text-anchor": "end", "font-size": 11 }, svg, ""),
      bars: barChart(svg, { x: 44, y: 20 + m * panelHeight, width: W - 52, height: 110, labels, yLabel: "weight" }),
    } : {
      key,
      title: make("svg:text", { x: 50 + m * 210 + 90, y: 16, "text-anchor": "middle", "font-size": 12, "font-weight": "bold", "data-room": 200 }, svg, name),
      info: make("svg:text", { x: 50 + m * 210 + 90, y: 32, "text-anchor": "middle", "font-size": 11, "data-room": 200 }, svg, ""),
      bars: barChart(svg, { x: 50 + m * 210, y: 40, width: 170, height: 130, labels, yLabel: m === 0 ? "weight" : "" }),
    }));
    // Entropy against β (log axis), with a marker at the slider.
    const [x0, y0, w, h] = narrow ? [48, 3 * panelHeight + 30, W - 60, 110] : [60, 250, 440, 110];
    const g = make("svg:g", {}, svg);
    const n = data.betas.length;
    const top = Math.log(data.labels.length) || 1;
    const px = (i) => x0 + (w * i) / (n - 1);
    const py = (e) => y0 + h - (h * e) / top;
    make("svg:line", { x1: x0, y1: y0 + h, x2: x0 + w, y2: y0 + h, stroke: "#333" }, g);
    make("svg:line", { x1: x0, y1: y0, x2: x0, y2: y0 + h, stroke: "#333" }, g);
    make("svg:text", { x: x0 + w / 2, y: y0 + h + 30, "text-anchor": "middle", "font-size": 11 }, g, "inverse temperature β (log scale)");
    make("svg:text", { x: x0 - 36, y: y0 + h / 2, transform: `rotate(-90 ${x0 - 36} ${y0 + h / 2})`, "text-anchor": "middle", "font-size": 11 }, g, "entropy (nats)");
    make("svg:text", { x: x0, y: y0 - 8, "font-size": 12, "font-weight": "bold" }, g, "Entropy of the weights across β");
    for (const e of [0, top]) make("svg:text", { x: x0 - 4, y: py(e) + 4, "text-anchor": "end", "font-size": 10 }, g, fixed(e, 2));
    [0, Math.floor((n - 1) / 2), n - 1].forEach((i) => make("svg:text", { x: px(i), y: y0 + h + 14, "text-anchor": "middle", "font-size": 10 }, g, fixed(data.betas[i], 2)));
    const colours = { softmax: "#0072b2", sparsemax: "#e69f00", hardmax: "#555" };
    methods.forEach(([key], m) => {
      const points = data.entropy[key].map((e, i) => `${px(i)},${py(e)}`).join(" ");
      make("svg:polyline", { points, fill: "none", stroke: colours[key], "stroke-width": 2, "stroke-dasharray": key === "hardmax" ? "4 3" : null }, g);
      const [lx, ly] = narrow ? [x0 + m * 80, y0 + h + 50] : [x0 + w + 8, y0 + 14 + m * 16];
      make("svg:text", { x: lx, y: ly, "font-size": 11, fill: colours[key] }, g, key);
    });
    const marker = make("svg:line", { y1: y0, y2: y0 + h, stroke: "#d62728", "stroke-width": 1.5 }, g);
    built = { key: JSON.stringify([data.labels, data.scores]), layout: frame.layout.key, panels, marker, px };
  }

  return function draw() {
    const data = dataOf(model);
    if (!built || built.key !== JSON.stringify([data.labels, data.scores]) || built.layout !== frame.layout.key) build(data);
    const b = frame.view.beta;
    for (const panel of built.panels) {
      const weights = panel.key === "hardmax" ? data.hardmax : data[panel.key][b];
      // counted before rounding (the kernel's, or softHardData's): a softmax weight of 1e-9 is drawn as
      // 0.00 but is not zero, which is chapter 3's point about softmax
      const nonzero = data.nonzero ? data.nonzero[panel.key][b] : weights.filter((w) => w > 0).length;
      const entropy = data.entropy[panel.key][b];
      panel.bars.set(weights, weights.map((w) => fixed(w, 2)), weights.map((w) => frame.colour(w)));
      panel.info.textContent = `entropy ${fixed(entropy, 2)} · ${nonzero} non-zero`;
    }
    built.marker.setAttribute("x1", built.px(b));
    built.marker.setAttribute("x2", built.px(b));
    beta.set(b);
  };
}

// -- chapters 4 and 7: HeadViewer ---------------------------------------------------------
// The hint under the head viewer's picture (both layouts); `every` > 1: the grid names every k-th token.
function headHint(every) {
  const named = every > 1 ? `; in the grid every ${every === 2 ? "second" : `${every}th`} token is named, the others when pointed at` : "";
  return `rows: queries · columns: keys (point at or tap a cell or a token to follow it${named})`;
}

function headViewer(frame) {
  const { model } = frame;
  let built = null;
  // The sentence box works on the website where the model was saved as ONNX (STATIC_COMPUTE) and
  // the browser runs WebAssembly; without WebAssembly the note says what typing needs.
  const noWasm = !frame.live && model.get("page_model") && typeof WebAssembly === "undefined";
  // A model the page cannot run (chapter 7's) may have saved the weights of its menu's sentences
  // (page_examples): the menu then works here, and typing a sentence of one's own needs a kernel.
  const examples = model.get("examples") || [];
  const menuOnly = !frame.live && !model.get("page_model") && Boolean(model.get("page_examples"));
  const box = textInput(frame, "sentence", "sentence", model.get("inputs").sentence,
    noWasm ? "edit the sentence (typing here runs the model in the page, which needs WebAssembly, off in this browser)" : "edit the sentence",
    { offline: menuOnly });
  if (menuOnly) {
    frame.offlineNote = "On this page the menu's sentences were computed when the book was built: typing a sentence of " +
      "your own needs a kernel to run the model (open the chapter in Colab or Jupyter).";
  }
  const exampleMenu = examples.length && frame.canSend
    ? select(frame, "example", "or try", [["a sentence…", null], ...examples.map((s) => [shorten(s, 36), s])], null, (v) => {
      if (v === null) return;
      box.value = v;
      frame.send("sentence", v);
    })
    : null;
  const layerMenu = select(frame, "layer", "layer", [], frame.view.layer, (v) => frame.setView({ layer: v }));
  const headMenu = select(frame, "head", "head", [], frame.view.head, (v) => frame.setView({ head: v }));

  function build(data) {
    if (frame.layout.narrow) {
      buildNarrow(data);
      return;
    }
    const T = data.labels.length;
    const H = data.num_heads;
    const labels = data.labels.map((l) => shorten(l, 10));
    const margin = 30 + 6.2 * Math.max(...labels.map((l) => l.length));
    const columns = Math.min(H, 4);
    const gridRows = Math.ceil(H / columns);
    const gap = 18;
    const width = 660;
    const panel = Math.min(170, (width - margin - 60 - (columns - 1) * gap) / columns);
    // Labels of at least 9 units (9 px or more in a desktop column): where a cell is smaller, every
    // k-th token is named and the others show when pointed at, as on a phone.
    const cellOf = panel / T;
    const every = cellOf * 0.9 >= 9 ? 1 : Math.ceil(10 / cellOf);
    const hintLines = wrapLines(headHint(every), width - 20, 11).length;
    const maps = 40 + gridRows * (panel + gap) + margin;  // the grid with its labels; the hint below
    const height = maps + 14 * (hintLines - 1);
    const svg = newPicture(frame, width, height);
    const heading = make("svg:text", { x: 10, y: 18, "font-weight": "bold", "font-size": 13 }, svg, "");
    const gridGroup = make("svg:g", {}, svg);
    const grid = [];
    for (let h = 0; h < H; h += 1) {
      const r = Math.floor(h / columns);
      const c = h % columns;
      const x = margin + c * (panel + gap);
      const y = 40 + r * (panel + gap);
      make("svg:text", { x: x + panel / 2, y: y - 4, "text-anchor": "middle", "font-size": 11 }, gridGroup, `head ${h}`);
      grid.push(heatmap(gridGroup, frame.colour, {
        x, y, cell: cellOf, rows: T, cols: T, every,
        rowLabels: c === 0 ? labels : null, colLabels: r === gridRows - 1 || h + columns >= H ? labels : null,
        font: every > 1 ? 9 : Math.min(11, cellOf * 0.9),
      }));
    }
    // One head alone, in the same box (so the cell keeps its height).
    const singleGroup = make("svg:g", {}, svg);
    const side = Math.min(maps - 40 - margin, width - margin - 80);
    const singleCell = side / T;
    const single = heatmap(singleGroup, frame.colour, {
      x: margin, y: 40, cell: singleCell, rows: T, cols: T, rowLabels: labels, colLabels: labels,
      numbers: T <= 10 && singleCell >= 22, font: 11, every: Math.ceil(11 / singleCell),
    });
    colourBar(svg, frame.colour, { x: width - 60, y: 40, height: Math.min(200, maps - 40 - margin), label: "attention weight" });
    writeText(make("svg:text", { x: 10, y: height - 8 - 14 * (hintLines - 1), "font-size": 11, fill: "#444" }, svg), headHint(every), width - 20);
    built = { text: data.labels.join(" ") + "|" + data.num_layers + "|" + H, layout: frame.layout.key, heading, grid, gridGroup, single, singleGroup };
    fillMenus(data);
  }

  // A narrow screen: two heads a row, labels at 10 px (every k-th token's where the cells are
  // smaller than a label; the rest show on pointing), the colour bar lying under the maps, the
  // hint wrapped.
  function buildNarrow(data) {
    const T = data.labels.length;
    const H = data.num_heads;
    const W = frame.layout.width;
    const font = 10;
    const labels = data.labels.map((l) => shorten(l, 8));
    const longest = Math.max(...labels.map((l) => l.length));
    const margin = 8 + 6 * longest;  // the row labels' width
    const depth = 16 + 4.9 * longest;  // the slanted column labels' depth
    const columns = Math.min(H, 2);
    const gridRows = Math.ceil(H / columns);
    const gap = 14;
    const panel = (W - margin - 6 - (columns - 1) * gap) / columns;
    const cell = panel / T;
    const every = Math.ceil(11 / cell);  // a label's pitch at least 11 units
    const rowPitch = panel + 18;
    const gridHeight = gridRows * rowPitch - 18 + depth;
    const side = W - margin - 6;
    const hint = wrapLines(headHint(every), W - 12, 11);
    const footerHeight = 40 + 14 * hint.length;
    const svg = newPicture(frame, W, 40 + Math.max(gridHeight, side + depth) + footerHeight);
    const heading = make("svg:text", { x: 6, y: 16, "font-weight": "bold", "font-size": 13 }, svg, "");
    const gridGroup = make("svg:g", {}, svg);
    const grid = [];
    for (let h = 0; h < H; h += 1) {
      const r = Math.floor(h / columns);
      const c = h % columns;
      const x = margin + c * (panel + gap);
      const y = 40 + r * rowPitch;
      make("svg:text", { x: x + panel / 2, y: y - 4, "text-anchor": "middle", "font-size": 11 }, gridGroup, `head ${h}`);
      grid.push(heatmap(gridGroup, frame.colour, {
        x, y, cell, rows: T, cols: T, font, every,
        rowLabels: c === 0 ? labels : null, colLabels: r === gridRows - 1 || h + columns >= H ? labels : null,
      }));
    }
    const singleGroup = make("svg:g", {}, svg);
    const singleCell = side / T;
    const single = heatmap(singleGroup, frame.colour, {
      x: margin, y: 40, cell: singleCell, rows: T, cols: T, rowLabels: labels, colLabels: labels, font,
      every: Math.ceil(11 / singleCell), numbers: T <= 10 && singleCell >= 22,
    });
    // The colour bar and the hint, under whichever picture shows (draw() moves them and sets the height).
    const footer = make("svg:g", {}, svg);
    colourBar(footer, frame.colour, { x: margin, y: 6, width: Math.min(side - 100, 180), label: "attention weight" });
    writeText(make("svg:text", { x: 6, y: 50, "font-size": 11, fill: "#444" }, footer), hint.join(" "), W - 12);
    const bottom = { all: 40 + gridHeight, single: 40 + side + depth };
    built = { text: data.labels.join(" ") + "|" + data.num_layers + "|" + H, layout: frame.layout.key, heading, grid, gridGroup, single, singleGroup,
      narrow: { svg, footer, footerHeight, bottom, width: W } };
    fillMenus(data);
  }

  function fillMenus(data) {
    const H = data.num_heads;
    layerMenu.fill(
      data.num_layers === 1 ? [["0 (the model has one layer)", 0]] : Array.from({ length: data.num_layers }, (_, i) => [`layer ${i}`, i]),
      Math.min(frame.view.layer, data.num_layers - 1),
    );
    headMenu.fill([["all heads", "all"], ...Array.from({ length: H }, (_, h) => [`head ${h}`, h])], frame.view.head);
  }

  return function draw() {
    const data = dataOf(model);
    if (!built || built.text !== data.labels.join(" ") + "|" + data.num_layers + "|" + data.num_heads || built.layout !== frame.layout.key) build(data);
    const v = frame.view;
    const layer = Math.min(v.layer, data.num_layers - 1);
    const all = v.head === "all";
    built.gridGroup.setAttribute("visibility", all ? "visible" : "hidden");
    built.singleGroup.setAttribute("visibility", all ? "hidden" : "visible");
    if (built.narrow) {  // the picture as tall as the maps shown
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
    layerMenu.set(layer);
    headMenu.set(v.head);
    if (exampleMenu) {  // the sentence shown, where it is one of the menu's
      const sentence = frame.live ? model.get("inputs").sentence : frame.inputs.sentence;
      exampleMenu.set(examples.includes(sentence) ? sentence : null);
    }
  };
}

// -- chapter 5: PositionalEncodingExplorer -------------------------------------------------
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

function positionalExplorer(frame) {
  const { model } = frame;
  const data0 = dataOf(model);
  const send = (name) => (value) => frame.canSend && frame.send(name, String(value));
  const dModel = slider(frame, "d_model", "d_model", { min: 2, max: data0.max_d_model, step: 2, value: data0.d_model, show: (v) => v, onCommit: send("d_model") });
  const length = slider(frame, "length", "positions", { min: 2, max: data0.max_length, step: 1, value: frame.view.length, show: (v) => v, onInput: (v) => frame.setView({ length: v }) });
  const base = slider(frame, "base", "base", { min: 1, max: 6, step: 0.25, value: Math.log10(data0.base), show: (v) => Math.round(10 ** v).toLocaleString("en"), onCommit: (v) => frame.canSend && frame.send("base", String(10 ** v)) });
  if (!frame.canSend) {
    dModel.input.disabled = true;
    base.input.disabled = true;
    frame.offline.push("change d_model or the base");
  }
  const measure = select(frame, "measure", "compare by", data0.measures.map((m) => [m, m]), frame.view.measure, (m) => frame.setView({ measure: m }));
  let svg = null;
  let parts = null;

  function build() {
    const { narrow, width: W } = frame.layout;
    if (narrow) {  // the table, then the similarity under it; the titles wrap
      const side = Math.min(W - 40, 260);
      const simY = 46 + side + 24 + 44;
      const centre = 30 + side / 2;
      svg = newPicture(frame, W, simY + side + 24 + 34);
      parts = {
        layout: frame.layout.key,
        wrap: W - 12,
        table: make("svg:image", { x: 30, y: 46, width: side, height: side, preserveAspectRatio: "none", style: "image-rendering: pixelated" }, svg),
        similarity: make("svg:image", { x: 30, y: simY, width: side, height: side, preserveAspectRatio: "none", style: "image-rendering: pixelated" }, svg),
        tableTitle: make("svg:text", { x: 6, y: 14, "font-size": 12, "font-weight": "bold" }, svg, ""),
        simTitle: make("svg:text", { x: 6, y: simY - 28, "font-size": 12, "font-weight": "bold" }, svg, ""),
        tableAxes: make("svg:text", { x: centre, y: 46 + side + 16, "text-anchor": "middle", "font-size": 11 }, svg, "dimension (sin even, cos odd) →"),
        simAxes: make("svg:text", { x: centre, y: simY + side + 16, "text-anchor": "middle", "font-size": 11 }, svg, "position j →   (rows: position i)"),
        rowsLabel: make("svg:text", { x: 20, y: 46 + side / 2, transform: `rotate(-90 20 ${46 + side / 2})`, "text-anchor": "middle", "font-size": 11 }, svg, "position →"),
        scale: make("svg:text", { x: 6, y: simY + side + 36, "font-size": 11 }, svg, ""),
      };
      return;
    }
    svg = newPicture(frame, 660, 330);
    parts = {
      layout: frame.layout.key,
      wrap: null,
      table: make("svg:image", { x: 60, y: 40, width: 250, height: 250, preserveAspectRatio: "none", style: "image-rendering: pixelated" }, svg),
      similarity: make("svg:image", { x: 380, y: 40, width: 200, height: 200, preserveAspectRatio: "none", style: "image-rendering: pixelated" }, svg),
      tableTitle: make("svg:text", { x: 185, y: 30, "text-anchor": "middle", "font-size": 12, "font-weight": "bold", "data-room": 285 }, svg, ""),
      simTitle: make("svg:text", { x: 480, y: 30, "text-anchor": "middle", "font-size": 12, "font-weight": "bold", "data-room": 215 }, svg, ""),
      tableAxes: make("svg:text", { x: 185, y: 308, "text-anchor": "middle", "font-size": 11 }, svg, "dimension (sin even, cos odd) →"),
      simAxes: make("svg:text", { x: 480, y: 258, "text-anchor": "middle", "font-size": 11 }, svg, "position j →   (rows: position i)"),
      rowsLabel: make("svg:text", { x: 40, y: 165, transform: "rotate(-90 40 165)", "text-anchor": "middle", "font-size": 11 }, svg, "position →"),
      scale: make("svg:text", { x: 380, y: 280, "font-size": 11 }, svg, ""),
    };
  }

  return function draw() {
    const data = dataOf(model);
    if (!svg || parts.layout !== frame.layout.key) build();
    const L = Math.min(frame.view.length, data.max_length);
    const pe = data.pe;
    const byOffset = data.similarity[frame.view.measure];
    const lo = Math.min(...byOffset.slice(0, L));
    const hi = Math.max(...byOffset.slice(0, L));
    if (parts.tableData !== data || parts.tableLength !== L) {  // the table does not change with the measure
      parts.table.setAttribute("href", imageOf(L, data.d_model, (i, j) => pe[i][j], frame.colour, -1, 1));
      parts.tableData = data;
      parts.tableLength = L;
    }
    parts.similarity.setAttribute("href", imageOf(L, L, (i, j) => byOffset[Math.abs(i - j)], frame.colour, lo, hi === lo ? lo + 1 : hi));
    writeText(parts.tableTitle, `PE: ${L} positions × d_model = ${data.d_model} (colours −1 … 1)`, parts.wrap);
    writeText(parts.simTitle, `${frame.view.measure} of PE[i] and PE[j]`, parts.wrap);
    writeText(parts.scale, `colours from ${fixed(lo, 2)} (dark) to ${fixed(hi, 2)} (light)`, parts.wrap);
    length.set(L);
    measure.set(frame.view.measure);
    dModel.set(data.d_model);
    base.set(Math.log10(data.base));
  };
}

// -- chapter 6: DecodingStepper ------------------------------------------------------------
function decodingStepper(frame) {
  const { model } = frame;
  let built = null;
  const move = (delta) => () => {
    const data = dataOf(model);
    frame.setView({ step: Math.min(data.output.length, Math.max(1, frame.view.step + delta)) });
  };
  button(frame, "back", "◀ back", move(-1));
  const step = slider(frame, "step", "step", { min: 1, max: dataOf(model).output.length, step: 1, value: frame.view.step, show: (v) => v, onInput: (v) => frame.setView({ step: v }) });
  button(frame, "next", "next ▶", move(+1));
  const layerMenu = select(frame, "layer", "layer", [], frame.view.layer, (v) => frame.setView({ layer: v }));
  const headMenu = select(frame, "head", "head", [], frame.view.head, (v) => frame.setView({ head: v }));
  const noWasm = !frame.live && model.get("page_model") && typeof WebAssembly === "undefined";  // see headViewer
  const source = textInput(frame, "source", "source", model.get("inputs").source,
    noWasm ? "decode another source (typing here runs the model in the page, which needs WebAssembly, off in this browser)" : "decode another source");

  // The picture's layout: a new source of the same length, with labels as wide, reuses it.
  const layoutOf = (data) => JSON.stringify([data.output.length, data.source.length, data.vocabulary,
    Math.max(...data.fed.map((f, i) => `${f} → ${data.output[i]}`.length))]);

  function build(data) {
    if (frame.layout.narrow) {
      buildNarrow(data);
      return;
    }
    const L = data.output.length;
    const T = data.source.length;
    const cell = Math.min(24, 200 / Math.max(L, T));
    const V = data.vocabulary.length;
    const barHeight = Math.min(14, Math.max(10, (L * cell + 40) / V));  // its label at 10 units: 9 px or more on a desktop
    const height = Math.max(50 + L * cell + 80, 50 + barHeight * V + 30);
    const svg = newPicture(frame, 660, height);
    const rowLabels = data.fed.map(() => "");
    const heading = make("svg:text", { x: 10, y: 18, "font-weight": "bold", "font-size": 13 }, svg, "");
    const labelWidth = 7 * Math.max(...data.fed.map((f, i) => `${f} → ${data.output[i]}`.length));
    const crossX = 12 + labelWidth;
    const selfX = crossX + T * cell + 24;
    const cross = heatmap(svg, frame.colour, { x: crossX, y: 50, cell, rows: L, cols: T, rowLabels, colLabels: data.source, xTitle: "cross-attention to the source", numbers: cell >= 22 });
    const selfMap = heatmap(svg, frame.colour, { x: selfX, y: 50, cell, rows: L, cols: L, colLabels: data.fed, xTitle: "causal self-attention" });
    const barsX = selfX + L * cell + 60;
    make("svg:text", { x: barsX - 40, y: 44, "font-size": 11, "data-room": (660 - barsX + 36).toFixed(2) }, svg, "next token (orange: chosen)");
    const barWidth = Math.max(60, 650 - barsX);
    const probBars = data.vocabulary.map((word, k) => {
      make("svg:text", { x: barsX - 4, y: 50 + k * barHeight + barHeight * 0.75, "text-anchor": "end", "font-size": Math.min(10, barHeight), "data-pitch": barHeight.toFixed(2) }, svg, shorten(word, 6));
      return make("svg:rect", { x: barsX, y: 50 + k * barHeight + 1, height: barHeight - 2, width: 0, fill: "#56b4e9" }, svg);
    });
    const note = make("svg:text", { x: 10, y: height - 6, "font-size": 11, fill: "#7a5b00" }, svg, "");
    built = { layout: layoutOf(data) + frame.layout.key, heading, cross, selfMap, probBars, barWidth, note, wrap: null };
    fillControls(data);
  }

  // A narrow screen: the cross-attention, the self-attention under it (its rows named too), then
  // the most likely next tokens (all of them when there are few), each with its probability.
  function buildNarrow(data) {
    const L = data.output.length;
    const T = data.source.length;
    const W = frame.layout.width;
    const rowLabels = data.fed.map(() => "");
    const labelWidth = 6.2 * Math.max(...data.fed.map((f, i) => `${f} → ${data.output[i]}`.length));
    const x = 10 + labelWidth;
    const cell = Math.min(26, (W - x - 6) / Math.max(L, T));
    const slant = (words) => 8 + 4.9 * Math.max(...words.map((w) => String(w).length));
    const crossY = 16 + 15 * 3 + 10;  // under a heading of up to three lines
    const selfY = crossY + L * cell + slant(data.source) + 24;
    const barsY = selfY + L * cell + slant(data.fed) + 30;
    const shown = data.vocabulary.length <= 12 ? data.vocabulary.length : 8;
    const barsX = 10 + 6.2 * Math.max(...data.vocabulary.map((w) => shorten(w, 6).length));
    const noteY = barsY + shown * 16 + 16;
    const svg = newPicture(frame, W, noteY + 22);  // room for a note of two lines
    const heading = make("svg:text", { x: 6, y: 16, "font-weight": "bold", "font-size": 12 }, svg, "");
    const cross = heatmap(svg, frame.colour, { x, y: crossY, cell, rows: L, cols: T, rowLabels, colLabels: data.source, xTitle: "cross-attention to the source", numbers: cell >= 22, font: 10 });
    const selfMap = heatmap(svg, frame.colour, { x, y: selfY, cell, rows: L, cols: L, rowLabels: rowLabels.slice(), colLabels: data.fed, xTitle: "causal self-attention", font: 10 });
    const title = shown < data.vocabulary.length ? `next token: the ${shown} most likely of ${data.vocabulary.length} (orange: chosen)` : "next token (orange: chosen)";
    make("svg:text", { x: 6, y: barsY - 8, "font-size": 11 }, svg, title);
    const barWidth = W - barsX - 40;
    const probBars = Array.from({ length: shown }, (_, k) => ({
      label: make("svg:text", { x: barsX - 4, y: barsY + k * 16 + 11, "text-anchor": "end", "font-size": 10 }, svg, ""),
      bar: make("svg:rect", { x: barsX, y: barsY + k * 16 + 2, height: 12, width: 0, fill: "#56b4e9" }, svg),
      value: make("svg:text", { x: barsX + 4, y: barsY + k * 16 + 11, "font-size": 10 }, svg, ""),
    }));
    const note = make("svg:text", { x: 6, y: noteY, "font-size": 11, fill: "#7a5b00" }, svg, "");
    built = { layout: layoutOf(data) + frame.layout.key, heading, cross, selfMap, probBars, barWidth, note, wrap: W - 12, barsX };
    fillControls(data);
  }

  function fillControls(data) {
    const L = data.output.length;
    step.setRange(1, L);
    layerMenu.fill(
      data.num_layers === 1 ? [["0 (the model has one layer)", 0]] : Array.from({ length: data.num_layers }, (_, i) => [`layer ${i}`, i]),
      Math.min(frame.view.layer, data.num_layers - 1),
    );
    headMenu.fill([["average of heads", -1], ...Array.from({ length: data.num_heads }, (_, h) => [`head ${h}`, h])], frame.view.head);
  }

  return function draw() {
    const data = dataOf(model);
    if (!built || built.layout !== layoutOf(data) + frame.layout.key) build(data);
    if (built.data !== data) {  // new numbers: the source letters under the cross-attention, the text box
      data.source.forEach((token, j) => built.cross.colLabel(j, token));
      source.value = data.source.join(" ");
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
      built.selfMap.colLabel(i, i < s ? data.fed[i] : "");  // tokens not fed yet stay unnamed
    }
    built.cross.mark(s - 1);
    built.selfMap.mark(s - 1);
    const probabilities = data.probabilities[s - 1];
    const chosen = data.chosen[s - 1];
    if (built.wrap) {  // the most likely tokens, most likely first
      const order = probabilities.map((p, k) => k).sort((a, b) => probabilities[b] - probabilities[a] || a - b);
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
    writeText(built.heading, `step ${s} of ${L}: fed '${data.fed[s - 1]}', writes '${data.output[s - 1]}' (layer ${layer}, ${v.head === -1 ? "average of heads" : `head ${v.head}`})`, built.wrap);
    writeText(built.note, data.stopped_at_limit
      ? `Stopped after ${L} tokens, the most this decoder writes (max_len = ${L}), without writing EOS.`
      : "", built.wrap);
    step.set(s);
    layerMenu.set(layer);
    headMenu.set(v.head);
  };
}

// -- the website's own computations (issue 35) ---------------------------------------------
// On the website there is no kernel. The controls whose numbers need only a little arithmetic
// (chapter 2's typed query, chapter 3's typed scores, chapter 5's d_model and base) compute
// them here instead, exactly as the Python widget does: the Python functions named in each
// comment are the reference, and tests/widgets/test_static_math.py runs both over the same
// inputs (numbers within 1e-4, the same messages for bad input). These functions touch no
// DOM; they are exported by name for that test (anywidget uses only the default export).

export class WidgetInputError extends Error {  // attention_book.widgets._base.WidgetInputError
  constructor(message, control) {
    super(message);
    this.control = control || null;
  }
}

// Python's str.isspace() characters: what str.strip() and str.split() remove.
const PY_SPACE = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const PY_TRIM = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");
const PY_RUNS = new RegExp(`[${PY_SPACE}]+`);

export function pyStrip(text, chars) {  // str.strip() and str.strip(chars)
  if (chars === undefined) return text.replace(PY_TRIM, "");
  let start = 0;
  let end = text.length;
  while (start < end && chars.includes(text[start])) start += 1;
  while (end > start && chars.includes(text[end - 1])) end -= 1;
  return text.slice(start, end);
}

export function pySplit(text) {  // str.split() with no separator
  return pyStrip(text).split(PY_RUNS).filter((word) => word !== "");
}

// Python's float(text) (ASCII digits; Python also reads other scripts' digits), or NaN where
// Python raises ValueError; a number too large for a float reads as an infinity, as in Python.
const PY_FLOAT = /^[+-]?(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*|\d(?:_?\d)*\.?)(?:[eE][+-]?\d(?:_?\d)*)?$/;
const PY_SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;
export function pyFloat(text) {
  const word = pyStrip(text);
  const special = PY_SPECIAL.exec(word);
  if (special) return special[2].toLowerCase() === "nan" ? { value: NaN } : { value: special[1] === "-" ? -Infinity : Infinity };
  if (!PY_FLOAT.test(word)) return null;
  return { value: Number(word.replace(/_/g, "")) };
}

export function pyInt(text) {  // Python's int(text) in base 10 (ASCII digits) and str() of it, or null where it raises
  const word = pyStrip(text);
  if (!/^[+-]?\d(?:_?\d)*$/.test(word)) return null;
  const whole = BigInt(word.replace(/_/g, ""));
  return { value: Number(whole), text: whole.toString() };
}

export function pyRepr(text) {  // repr() of a str
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of text) {
    const code = ch.codePointAt(0);
    if (ch === quote || ch === "\\") out += "\\" + ch;
    else if (ch === "\t") out += "\\t";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch !== " " && /[\p{C}\p{Z}]/u.test(ch)) {
      const hex = code.toString(16);
      out += code < 0x100 ? "\\x" + hex.padStart(2, "0") : code < 0x10000 ? "\\u" + hex.padStart(4, "0") : "\\U" + hex.padStart(8, "0");
    } else out += ch;
  }
  return out + quote;
}

// The exact decimal digits of |x| (x finite, non-zero) rounded half to even, as Python's
// formatting rounds: `keep(exponent)` says how many digits to keep.
function roundedDigits(x, keep) {
  const [mantissa, power] = Math.abs(x).toExponential(99).split("e");
  let digits = mantissa.replace(".", "");
  let exponent = Number(power);
  const count = keep(exponent);
  if (count <= 0) {  // every kept digit lies left of the first one: 0 or one unit of the last place
    const up = count === 0 && (digits[0] > "5" || (digits[0] === "5" && /[1-9]/.test(digits.slice(1))));
    return up ? { digits: "1", exponent: exponent + 1, count: 1 } : { digits: "", exponent, count: 0 };
  }
  const head = digits.slice(0, count);
  const tail = digits.slice(count);
  const up = tail[0] > "5" || (tail[0] === "5" && (/[1-9]/.test(tail.slice(1)) || Number(head[head.length - 1]) % 2 === 1));
  digits = head;
  if (up) {
    const raised = (BigInt(head) + 1n).toString();
    if (raised.length > head.length) exponent += 1;
    digits = raised.slice(0, head.length);
  }
  return { digits, exponent, count };
}

export function pyFixed(x, places) {  // Python's f"{x:.{places}f}"
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  let whole = "0";
  let fraction = "0".repeat(places);
  if (x !== 0) {
    const { digits, exponent } = roundedDigits(x, (e) => e + 1 + places);
    if (digits) {
      const all = digits.padEnd(exponent + 1 + places, "0");  // the number times 10^places
      const padded = all.padStart(places + 1, "0");
      whole = padded.slice(0, padded.length - places);
      fraction = padded.slice(padded.length - places);
    }
  }
  return sign + whole + (places ? "." + fraction : "");
}

export function pyGeneral(x, precision = 6) {  // Python's f"{x:.{precision}g}"
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const sign = x < 0 ? "-" : "";
  const { digits, exponent } = roundedDigits(x, () => precision);
  if (exponent >= -4 && exponent < precision) {
    let text;
    if (exponent >= 0) {
      const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
      text = whole + "." + digits.slice(exponent + 1);
    } else {
      text = "0." + "0".repeat(-exponent - 1) + digits;
    }
    text = text.replace(/0+$/, "").replace(/\.$/, "");
    return sign + text;
  }
  const mantissa = (digits[0] + "." + digits.slice(1)).replace(/0+$/, "").replace(/\.$/, "");
  return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
}

export function formatExact(value) {  // attention_book.analysis.formatting.format_exact
  const text = pyGeneral(value, 6);
  return text === "-0" ? "0" : text;
}

export function formatShort(value, digits = 2) {  // attention_book.analysis.formatting.format_short
  const text = pyFixed(value, digits).replace(/0+$/, "").replace(/\.$/, "");
  return text === "-0" || text === "" ? "0" : text;
}

// attention_book.widgets._base.rounded: numpy's round (to even) at `digits` decimals.
function roundTo(x, digits) {
  const scale = 10 ** digits;
  const y = x * scale;
  let r = Math.round(y);
  if (r - y === 0.5 && r % 2 !== 0) r -= 1;
  return r / scale;
}
function rounder(exact) {
  const round = (values, digits = 4) => (Array.isArray(values) ? values.map((v) => round(v, digits)) : exact ? values : roundTo(values, digits));
  return round;
}

// attention_book.attention.softmax, sparsemax, hardmax and entropy (attention_book.soft_hard), on one row.
export function softmaxRow(z) {
  const largest = Math.max(...z);
  const shift = Number.isFinite(largest) ? largest : 0;
  const e = z.map((v) => Math.exp(v - shift));
  const total = Math.max(1, e.reduce((a, b) => a + b, 0));
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

// -- chapter 3: attention_book.widgets.soft_hard_explorer ---------------------------------
const SCORE_LIMIT = 20;
const MAX_SCORE_KEYS = 10;

export function parseScores(text, limit = SCORE_LIMIT, maxKeys = MAX_SCORE_KEYS) {  // parse_scores
  const entries = pyStrip(pyStrip(text), "[]()").split(",").map((entry) => pyStrip(entry));
  if (!entries.some((entry) => entry)) {
    throw new WidgetInputError('type one score per key, separated by commas, for example "river=1.9, bank=1.5, the=0.2"');
  }
  if (entries.length > maxKeys) throw new WidgetInputError(`${entries.length} scores were given; this widget shows 1 to ${maxKeys} keys`);
  const labels = [];
  const scores = [];
  entries.forEach((entry, index) => {
    if (!entry) throw new WidgetInputError(`entry ${index + 1} is empty: remove the extra comma`);
    const cut = entry.lastIndexOf("=");
    const number = cut < 0 ? entry : entry.slice(cut + 1);
    const label = pyStrip(cut < 0 ? "" : entry.slice(0, cut)) || `key ${index + 1}`;
    const parsed = pyFloat(number);
    if (parsed === null) {
      throw new WidgetInputError(`${pyRepr(pyStrip(number))} (entry ${index + 1}) is not a number; write "label=score" or just the score`);
    }
    const score = parsed.value;
    if (!Number.isFinite(score)) throw new WidgetInputError(`${pyRepr(pyStrip(number))} (entry ${index + 1}) is not a finite number`);
    if (Math.abs(score) > limit) {
      throw new WidgetInputError(`the score of ${pyRepr(label)} is ${formatExact(score)}; keep scores between ${formatExact(-limit)} and ${formatExact(limit)}`);
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

// -- chapter 5: attention_book.widgets.positional_explorer --------------------------------
const BASE_RANGE = [10, 1000000];

export function positionalSettings(inputs, maxDModel = 256) {  // PositionalEncodingExplorer._settings
  const whole = pyInt(inputs.d_model);
  if (whole === null) throw new WidgetInputError(`d_model must be a whole number, but ${pyRepr(inputs.d_model)} was given`, "d_model");
  const dModel = whole.value;
  if (dModel % 2 !== 0 || !(dModel >= 2 && dModel <= maxDModel)) {
    throw new WidgetInputError(
      `d_model must be an even number from 2 to ${maxDModel} (each frequency fills a sine and a cosine column), but it is ${whole.text}`, "d_model");
  }
  const parsed = pyFloat(inputs.base);
  if (parsed === null) throw new WidgetInputError(`the base must be a number, but ${pyRepr(inputs.base)} was given`, "base");
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
  const dot = table.map((row) => row.reduce((sum, v, k) => sum + v * table[0][k], 0));  // PE[0] . PE[j]
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

// -- chapter 2: attention_book.widgets.key_value_explorer ---------------------------------
export function parseQuery(text, size, limit) {  // parse_query
  const cleaned = pySplit(pyStrip(pyStrip(text), "[]()").replace(/,/g, " "));
  if (!cleaned.length) throw new WidgetInputError(`type ${size} numbers separated by commas, for example "${Array(size).fill("0").join(", ")}"`);
  const numbers = cleaned.map((word) => {
    const parsed = pyFloat(word);
    if (parsed === null) throw new WidgetInputError(`${pyRepr(word)} is not a number; type ${size} numbers separated by commas`);
    if (!Number.isFinite(parsed.value)) throw new WidgetInputError(`${pyRepr(word)} is not a finite number`);
    return parsed.value;
  });
  if (numbers.length !== size) {
    throw new WidgetInputError(`the keys have ${size} components, so the query needs ${size} numbers, but ${numbers.length} were given`);
  }
  numbers.forEach((number, index) => {
    if (Math.abs(number) > limit) {
      throw new WidgetInputError(`component ${index + 1} is ${formatShort(number)}, but the sliders go from ${formatShort(-limit)} to ${formatShort(limit)}`);
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
    return { weights: round(sweep.map((s) => s.weights)), values: round(sweep.map((s) => s.value), 3), scores: round(sweep.map((s) => s.scores), 3) };
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

// -- chapter 1: attention_book.widgets.attention_explorer ---------------------------------
// drawn_vector's generator (defined in the comment above it in attention_explorer.py), step
// for step: 32-bit integers kept unsigned (>>> 0) and multiplied with Math.imul, floats in
// float64 with the same operations in the same order, ln written out as there, so a word
// gets the same float32 numbers here as in Python.
const GOLDEN32 = 0x9e3779b9;
function mix32(x) {  // _mix32: MurmurHash3's 32-bit finaliser
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x85ebca6b) >>> 0;
  x = (x ^ (x >>> 13)) >>> 0;
  x = Math.imul(x, 0xc2b2ae35) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}
function fnv1a(bytes) {  // _fnv1a: the 32-bit FNV-1a hash
  let h = 0x811c9dc5;
  for (const byte of bytes) h = Math.imul(h ^ byte, 0x01000193) >>> 0;
  return h;
}
export function naturalLog(x) {  // _natural_log: ln(x) for 0 < x < 1 with + - * / only
  let exponent = 0;
  while (x < 1) {
    x *= 2;
    exponent -= 1;
  }
  if (x > 1.4142135623730951) {
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
  return 2 * total + exponent * 0.6931471805599453;
}
export function drawnVector(word, seed, dim) {  // drawn_vector, as float32 numbers
  const key = mix32((fnv1a(new TextEncoder().encode(word)) + mix32(seed >>> 0)) >>> 0);
  let counter = 0;
  const normals = [];
  while (normals.length < dim) {
    const pair = [];
    for (let n = 0; n < 2; n += 1) {
      counter += 1;
      const bits = mix32((key + Math.imul(counter, GOLDEN32)) >>> 0);
      pair.push((bits + 0.5) / 2147483648 - 1);  // (-1, 1)
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
  if (!words.length) throw new WidgetInputError("the sentence is empty: type a few words separated by spaces", "sentence");
  if (words.length > saved.max_tokens) {
    throw new WidgetInputError(`the sentence has ${words.length} words; this widget shows at most ${saved.max_tokens}`, "sentence");
  }
  if (!saved.drawn) {
    const known = saved.vocabulary.words;
    const unknown = [...new Set(words)].filter((word) => !known.includes(word));
    if (unknown.length) {
      throw new WidgetInputError(
        `unknown token${unknown.length > 1 ? "s" : ""} ${unknown.map((word) => pyRepr(word)).join(", ")}: ` +
          `this sentence's vectors were given, so only these tokens have one: ${known.join(", ")}`, "sentence");
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
  const x = tokens.map((word) => (saved.drawn ? drawnVector(word, saved.seed, saved.d) : given.vectors[given.words.indexOf(word)]));
  const d = x[0].length;
  const root = Math.sqrt(d);
  const base = x.map((query) => x.map((key) => query.reduce((sum, v, c) => sum + v * key[c], 0) / root));  // attention_scores
  const taus = saved.temperatures.map((tau) => Math.fround(tau));  // torch.tensor(TEMPERATURES): float32
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
        const h = w.map((row) => x[0].map((_, c) => row.reduce((sum, a, j) => sum + a * x[j][c], 0)));  // h_i = sum_j a_ij x_j
        return { s, w, h };
      });
      per.scores.push(masked(round(settings.map((one) => one.s), 3)));
      per.weights.push(round(settings.map((one) => one.w)));
      per.outputs.push(round(settings.map((one) => one.h), 3));
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
  const words = pySplit(rules.lowercase ? text.toLowerCase() : text);  // str.lower(), str.split()
  if (!words.length) throw new WidgetInputError("the sentence is empty: type a few words separated by spaces", "sentence");
  const unknown = [...new Set(words)].filter((word) => !index.has(word));
  if (unknown.length) {
    throw new WidgetInputError(
      `unknown word${unknown.length > 1 ? "s" : ""} ${unknown.map((word) => pyRepr(word)).join(", ")}: ` +
        `the model only knows its vocabulary (${rules.known})`, "sentence");
  }
  if (rules.max_len !== null && words.length > rules.max_len) {
    throw new WidgetInputError(`the sentence has ${words.length} words but the model reads at most ${rules.max_len}`, "sentence");
  }
  if (words.length > page.max_tokens) {
    throw new WidgetInputError(`the sentence has ${words.length} tokens; this viewer shows at most ${page.max_tokens}`, "sentence");
  }
  const ids = words.map((word) => index.get(word));
  const [low, high] = [Math.min(...ids), Math.max(...ids)];
  if (low < 0 || high >= page.vocab_size) {  // the embedding's checks (transformer._Embedding)
    throw new WidgetInputError(`the model cannot read this sentence: token ids must lie in [0, ${page.vocab_size}) ` +
      `for this vocabulary, but range from ${low} to ${high}`, "sentence");
  }
  if (ids.length > page.max_len) {
    throw new WidgetInputError(`the model cannot read this sentence: the sequence has ${ids.length} tokens ` +
      `but the model allows at most max_len=${page.max_len} positions`, "sentence");
  }
  return { words, ids };
}

// onnxruntime-web, loaded once per page on first use: the site serves it as one classic script
// (tools/site/build_book.py, _copy_onnxruntime; its URL set by tools/site/widgets_offline.js)
// holding the runtime's ES module and its WebAssembly binary, gzip-compressed, as text.
let onnxRuntime = null;
function loadOnnxRuntime() {
  if (onnxRuntime) return onnxRuntime;
  onnxRuntime = (async () => {
    const url = typeof window !== "undefined" ? window.__attentionBookOnnxRuntimeScript : undefined;
    if (!url) throw new Error("this page does not serve onnxruntime-web");
    if (!window.__attentionBookOnnxRuntime) {
      await new Promise((resolve, reject) => {
        const script = make("script", { src: url });
        script.onload = resolve;
        script.onerror = () => reject(new Error(`${url} did not load`));
        document.head.appendChild(script);
      });
    }
    const files = window.__attentionBookOnnxRuntime;
    const moduleUrl = URL.createObjectURL(new Blob([files.module], { type: "text/javascript" }));
    const ort = await import(/* webpackIgnore: true */ moduleUrl);
    const packed = base64Bytes(files.wasmGzipBase64);
    const unpacked = new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"));
    ort.env.wasm.wasmBinary = await new Response(unpacked).arrayBuffer();
    ort.env.wasm.numThreads = 1;  // a page opened from file:// is not cross-origin isolated: no threads
    ort.env.wasm.proxy = false;
    return ort;
  })();
  onnxRuntime.catch(() => {
    onnxRuntime = null;  // the next sentence tries again
  });
  return onnxRuntime;
}
function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
const onnxSessions = new Map();  // the model's base64 text -> Promise of { ort, session }
function headSession(page) {
  let ready = onnxSessions.get(page.onnx);
  if (!ready) {
    ready = loadOnnxRuntime().then(async (ort) => ({ ort, session: await ort.InferenceSession.create(base64Bytes(page.onnx)) }));
    onnxSessions.set(page.onnx, ready);
    ready.catch(() => onnxSessions.delete(page.onnx));
  }
  return ready;
}

// HeadViewer.compute: every layer's and head's weights (layers x heads x T x T, rows = queries).
export function headData(inputs, page, { exact = false } = {}) {
  const { words, ids } = headTokens(inputs.sentence, page);  // bad input: thrown here, at once
  const T = ids.length;
  return headSession(page).then(
    async ({ ort, session }) => {
      const tokens = new ort.Tensor("int64", BigInt64Array.from(ids, (id) => BigInt(id)), [1, T]);
      const output = (await session.run({ [page.input]: tokens }))[page.output];
      const [L, H] = output.dims;
      const values = output.data;  // Float32Array, (L, H, T, T) row-major
      const weights = Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) =>
        Array.from({ length: T }, (_, i) => Array.from(values.subarray(((l * H + h) * T + i) * T, ((l * H + h) * T + i + 1) * T)))));
      return { labels: words, num_layers: L, num_heads: H, weights: rounder(exact)(weights, page.digits) };
    },
    (error) => {
      throw new WidgetInputError(`typing here runs the model in the page, but onnxruntime-web did not start: ${error.message}`, "sentence");
    },
  );
}

// The head viewer's answers saved for the website (page_examples: sentence -> what
// HeadViewer.compute sent for it): the menu's sentences only.
export function exampleData(answers) {
  return (inputs) => {
    if (!Object.prototype.hasOwnProperty.call(answers, inputs.sentence)) {
      throw new WidgetInputError("this page holds the weights of the menu's sentences only: typing a sentence of your own " +
        "needs a kernel (open the chapter in Colab or Jupyter)", "sentence");
    }
    return answers[inputs.sentence];
  };
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
  if (symbols.includes(" ") && symbols.every((symbol) => [...symbol].length === 1)) {  // _reads_characters
    let characters = [...pyStrip(text)];
    if (characters.length > 2 && characters.filter((_, i) => i % 2 === 1).every((c) => c === " ")) {
      characters = characters.filter((_, i) => i % 2 === 0);  // "3 /   3" is "3/ 3"
    }
    if (!characters.length) throw new WidgetInputError('type a date as you would write it, for example "tuesday 3rd of march 1998"', "source");
    const unknown = [...new Set(characters)].filter((c) => !known.has(c));
    if (unknown.length) throw new WidgetInputError(`unknown character ${pyRepr(unknown[0])}; this model knows ${pyRepr(symbols.join(""))}`, "source");
    if (characters.length > maxLen) throw new WidgetInputError(`the model reads at most ${maxLen} characters, but ${characters.length} were given`, "source");
    return characters;
  }
  const example = symbols.slice(0, Math.min(4, symbols.length)).join(" ");
  let words = pySplit(text.replaceAll(",", " "));
  if (!words.length) throw new WidgetInputError(`type a source sequence, symbols separated by spaces, for example "${example}"`, "source");
  if (words.length === 1 && !known.has(words[0]) && symbols.every((symbol) => [...symbol].length === 1)) words = [...words[0]];  // "CAFB"
  if (symbols.every((symbol) => symbol.toUpperCase() === symbol)) words = words.map((word) => (known.has(word.toUpperCase()) ? word.toUpperCase() : word));
  const specials = words.filter((word) => page.specials.names.includes(word));
  if (specials.length) throw new WidgetInputError(`${pyRepr(specials[0])} is a special token that the model adds itself; type only symbols from ${pyListRepr(symbols)}`, "source");
  const unknown = words.filter((word) => !known.has(word));
  if (unknown.length) throw new WidgetInputError(`unknown token ${pyRepr(unknown[0])}; this model knows the symbols ${symbols.join(" ")}`, "source");
  if (words.length > maxLen) throw new WidgetInputError(`the model reads at most ${maxLen} tokens, but ${words.length} were given`, "source");
  return words;
}

export function decodingData(inputs, page, { exact = false } = {}) {
  const labels = parseSource(inputs.source, page);  // bad input: thrown here, at once
  const tokens = [...page.specials.names, ...page.symbols];
  const index = new Map(tokens.map((token, i) => [token, i]));  // Vocabulary.encode: the last of equal labels
  const { bos, eos, pad } = page.specials;
  const round = rounder(exact);
  return headSession(page).then(
    async ({ ort, session }) => {
      const source = new ort.Tensor("int64", BigInt64Array.from(labels, (label) => BigInt(index.get(label))), [1, labels.length]);
      const written = [];
      let last = null;
      for (let k = 0; k < page.max_len; k += 1) {
        const fed = [bos, ...written];
        const target = new BigInt64Array(page.target_len).fill(BigInt(pad));
        fed.forEach((id, i) => { target[i] = BigInt(id); });
        last = await session.run({ source, target: new ort.Tensor("int64", target, [1, page.target_len]) });
        const V = last.logits.dims[1];
        const row = last.logits.data.subarray((fed.length - 1) * V, fed.length * V);
        let best = 0;
        for (let v = 1; v < V; v += 1) if (row[v] > row[best]) best = v;  // argmax: the first of equal scores
        written.push(best);
        if (best === eos) break;
      }
      const L = written.length;
      const V = last.logits.dims[1];
      const [layers, heads, T] = last.self.dims;
      const Tin = labels.length;
      const probabilities = Array.from({ length: L }, (_, t) => {
        const row = Array.from(last.logits.data.subarray(t * V, (t + 1) * V));
        return softmaxRow(row);
      });
      // rows 0..L-1 of one layer's and head's (T, cols) matrix, their first `take` columns
      const pick = (tensor, cols, take, l, h) => Array.from({ length: L }, (_, i) => {
        const start = ((l * heads + h) * T + i) * cols;
        return Array.from(tensor.data.subarray(start, start + take));
      });
      const perLayer = (tensor, cols, take) => Array.from({ length: layers }, (_, l) => {
        const rows = Array.from({ length: heads }, (_, h) => pick(tensor, cols, take, l, h));
        const entry = { average: round(rows[0].map((row, i) => row.map((_, j) => rows.reduce((sum, m) => sum + m[i][j], 0) / heads)), 3) };
        rows.forEach((matrix, h) => { entry[String(h)] = round(matrix, 3); });
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
    },
    (error) => {
      throw new WidgetInputError(`typing here runs the model in the page, but onnxruntime-web did not start: ${error.message}`, "source");
    },
  );
}

// The kinds whose controls compute on the website, and how: null where the saved payload
// lacks what they need (a chapter saved before this code existed).
const STATIC_COMPUTE = {
  soft_hard: (saved) => (saved.betas ? softHardData : null),
  positional: (saved) => (saved.max_length && saved.measures ? positionalData : null),
  key_value: (saved) => (saved.keys && saved.values && saved.limit ? keyValueData : null),
  attention: (saved) => (saved.max_tokens && "drawn" in saved ? attentionData : null),
  // the head viewer's model, saved as ONNX (absent: any other model; no WebAssembly: headViewer says so);
  // a model too large for the page: the weights of the menu's sentences, computed when the book was built
  heads: (saved, model) => {
    const page = model.get("page_model");
    if (!page) return model.get("page_examples") ? exampleData(JSON.parse(model.get("page_examples"))) : null;
    if (typeof WebAssembly === "undefined") return null;
    const parsedPage = JSON.parse(page);
    return (inputs) => headData(inputs, parsedPage);
  },
  // the decoding stepper's model, saved as ONNX (as the head viewer's)
  decoding: (saved, model) => {
    const page = model.get("page_model");
    if (!page || typeof WebAssembly === "undefined") return null;
    const parsedPage = JSON.parse(page);
    return (inputs) => decodingData(inputs, parsedPage);
  },
};

// The kernel's numbers, parsed once per new payload; on the website, the numbers this page
// computed last (staticSend) replace the saved ones.
const parsed = new WeakMap();
const computedHere = new WeakMap();
function dataOf(model) {
  if (computedHere.has(model)) return computedHere.get(model);
  const text = model.get("payload");
  const cached = parsed.get(model);
  if (cached && cached.text === text) return cached.data;
  const data = JSON.parse(text);
  parsed.set(model, { text, data });
  return data;
}

const RENDERERS = {
  attention: attentionExplorer,
  key_value: keyValueExplorer,
  soft_hard: softHardExplorer,
  heads: headViewer,
  positional: positionalExplorer,
  decoding: decodingStepper,
};

let widgetCount = 0;

function render({ model, el }) {
  addStyle();
  const live = !(typeof window !== "undefined" && window.__attentionBookStaticPage);
  el.classList.add("ab-widget", "jupyter-widgets");  // the class every rendered Jupyter widget carries
  el.dataset.kind = model.get("kind");
  el.dataset.frames = "0";
  widgetCount += 1;
  const frame = {
    model, live, id: `ab-widget-${widgetCount}`, errors: {}, offline: [],
    view: Object.assign({}, model.get("view")),
    colour: makePalette(model.get("palette")),
  };
  // Without a kernel, the controls of STATIC_COMPUTE's kinds compute here (frame.local).
  const local = STATIC_COMPUTE[model.get("kind")];
  frame.local = live || !local ? null : local(dataOf(model), model);
  frame.canSend = live || Boolean(frame.local);
  frame.inputs = Object.assign({}, model.get("inputs"));
  frame.shownSource = frame.inputs.source;
  frame.error = null;
  make("div", { class: "ab-title" }, el, model.get("title"));
  frame.controls = make("div", { class: "ab-controls" }, el);
  frame.picture = make("div", { class: "ab-picture" }, el);
  make("div", { class: "ab-stale-note" }, frame.picture, "stale: shows the last input that worked");
  const footer = make("div", { class: "ab-footer" }, el);
  const devices = model.get("devices");
  let deviceMenu = null;
  if (devices.length === 1) {
    // Where the model runs matters only with a kernel: the website's page (no kernel) leaves it out.
    if (live) make("span", { class: "ab-device" }, footer, devices[0] === "cpu" ? "device: cpu; no GPU found" : `device: ${devices[0]}`);
  } else {
    const wrapper = make("span", { class: "ab-control" }, footer);
    make("label", {}, wrapper, "device");
    deviceMenu = make("select", { name: "device" }, wrapper);
    for (const d of devices) make("option", { value: d }, deviceMenu, d);
    deviceMenu.value = model.get("device_name");
    if (!live) deviceMenu.disabled = true;
    deviceMenu.addEventListener("change", () => {
      model.set("device_name", deviceMenu.value);
      model.save_changes();
    });
  }
  const status = make("span", { class: "ab-status" }, footer, live ? model.get("status") : "");
  const note = make("div", { class: "ab-note" }, el);

  frame.send = function (name, value) {
    frame.sentAt = performance.now();
    if (!live) {
      staticSend(name, value);
      return;
    }
    model.set("inputs", Object.assign({}, model.get("inputs"), { [name]: value }));
    model.save_changes();
  };
  // The website's answer to a control (no kernel): what AttentionWidget.update does, here.
  // frame.local answers with the data or, where a model runs (the head viewer), a Promise of
  // it; only the answer to the latest input is shown.
  function staticSend(name, value) {
    frame.inputs = Object.assign({}, frame.inputs, { [name]: value });
    const sentAt = frame.sentAt;
    function accept(data) {
      computedHere.set(model, data);
      frame.error = null;
      if (model.get("kind") === "key_value") frame.view.moved = {};  // KeyValueExplorer.adjust_view
      if (model.get("kind") === "attention") frame.view.query = Math.min(frame.view.query, data.tokens.length - 1);  // AttentionExplorer.adjust_view
      if (model.get("kind") === "decoding") {  // DecodingStepper.adjust_view: a new source shows its whole decoding
        const steps = data.output.length;
        frame.view.step = value !== frame.shownSource ? steps : Math.min(Math.max(1, frame.view.step), steps);
        frame.shownSource = value;
      }
      redraw();
    }
    function refuse(error) {
      if (!(error instanceof WidgetInputError)) throw error;
      frame.error = { control: error.control || name, message: error.message };
    }
    function finish() {
      showError();
      el.dataset.roundTripMs = String(performance.now() - sentAt);
    }
    let answer;
    try {
      answer = frame.local(frame.inputs, dataOf(model));
      if (!(answer && typeof answer.then === "function")) accept(answer);
    } catch (error) {
      refuse(error);
    }
    if (answer && typeof answer.then === "function") {
      const latest = (handle) => (result) => {
        if (frame.sentAt !== sentAt) return;  // a newer input is on its way
        try {
          handle(result);
        } finally {
          finish();
        }
      };
      answer.then(latest(accept), latest(refuse));
      return;
    }
    finish();
  }
  let draw = null;
  function redraw() {
    const start = performance.now();
    frame.layout = pictureLayout(frame);
    draw();
    placePicture(frame);
    fitLabels(frame.svg);
    el.dataset.frames = String(Number(el.dataset.frames) + 1);
    el.dataset.drawnAt = String(performance.now());
    el.dataset.drawMs = String(performance.now() - start);  // the benchmark reports how much of a redraw is drawing
  }
  frame.setView = function (patch) {
    Object.assign(frame.view, patch);
    redraw();
    if (live) {
      try {
        model.set("view", Object.assign({}, frame.view));
        model.save_changes();
      } catch (error) {
        /* no kernel to tell: the picture is already drawn */
      }
    }
  };
  draw = RENDERERS[model.get("kind")](frame);
  function showError() {
    const error = frame.error || model.get("error") || {};
    for (const [name, span] of Object.entries(frame.errors)) span.textContent = error.control === name ? `⚠ ${error.message}` : "";
    frame.picture.classList.toggle("ab-stale", Boolean(error.message));
    if (error.message && !frame.errors[error.control]) note.textContent = `⚠ ${error.message}`;
  }
  function showNote() {
    note.textContent = frame.offlineNote ||
      (frame.offline.length ? `On this page the numbers are fixed: open the chapter in Colab or Jupyter to ${frame.offline.join(" or ")}.` : "");
  }
  redraw();
  showNote();
  showError();
  let observer = null;
  if (typeof ResizeObserver !== "undefined") {
    observer = new ResizeObserver(() => {  // a new layout where the width crosses NARROW_PX, else the labels fitted
      if (pictureLayout(frame).key !== frame.layout.key) redraw();
      else fitLabels(frame.svg);
    });
    observer.observe(frame.picture);
  }
  const onData = () => {
    frame.view = Object.assign({}, frame.view, model.get("view"));
    redraw();
    showError();
    if (frame.sentAt !== undefined) el.dataset.roundTripMs = String(performance.now() - frame.sentAt);
  };
  const onError = () => {
    showError();
    if (frame.sentAt !== undefined) el.dataset.roundTripMs = String(performance.now() - frame.sentAt);
  };
  const onStatus = () => {
    status.textContent = model.get("status");
  };
  const onView = () => {  // the view set from Python (widget.set_view(...) in a cell)
    const view = model.get("view");
    if (JSON.stringify(view) !== JSON.stringify(frame.view)) {
      frame.view = Object.assign({}, frame.view, view);
      redraw();
    }
  };
  model.on("change:payload", onData);
  model.on("change:error", onError);
  model.on("change:status", onStatus);
  model.on("change:view", onView);
  return () => {
    if (observer) observer.disconnect();
    model.off("change:view", onView);
    model.off("change:payload", onData);
    model.off("change:error", onError);
    model.off("change:status", onStatus);
  };
}
