// The pictures and controls of attention_book's widgets (chapters 1-7), drawn by the browser: the kit
// every widget shares (this file: DOM helpers, colours, style, controls, the kernel's numbers).
//
// The kernel (Python, torch) computes the numbers and sends them in the widget's `data`;
// these files draw them as SVG and handle every control that only changes what is shown
// (temperature, query, mask, layer, head, step, hover) without asking the kernel. Controls
// that need the model (a new sentence, source or query text) write the widget's `inputs`,
// and the kernel answers with new `data` or with an `error` shown next to that control.
//
// The files of widgets/js/ are joined, in the order of attention_book.widgets._base.MODULE_FILES and
// without their `import` lines, into one ES module with no imports (widget_module_source()): Python
// serves it as anywidget's ES module (`_esm`) in Jupyter, VS Code and Colab; on the book's website
// the widget state saved in each chapter carries the same source (`make widgets` rewrites it there),
// and the page has no kernel (window.__attentionBookStaticPage, set by tools/site/widgets_offline.js):
// there the controls whose numbers are plain arithmetic (chapter 1's sentence, chapter 2's query,
// chapter 3's scores, chapter 5's d_model and base) are computed by these files (each widget's
// `pageCompute`, mirroring the Python widgets), chapter 4's sentence and chapter 6's source run the
// chapter's model, saved as ONNX, with onnxruntime-web (headData, decodingData), and chapter 7's
// sentence runs its pretrained model, too large to save with the page, from a script the site serves
// beside it, loaded on the first sentence typed (pretrainedData); its menu of sentences draws the
// weights saved when the book was built, at once (exampleData).
//
// One file per widget, in chapter order (01_attention.js ... 06_decoding.js), holds its drawing,
// its page computation and its view rule; kit.js, pictures.js (drawing pieces), python.js (Python's
// semantics), onnx.js (the ONNX loader), wordpiece.js (BERT's tokenizer) are shared; render.js builds
// a widget. The rules these files
// follow (width 120, units of at most 60 lines, Biome's format and lint) are in CONTRIBUTING.md.

/**
 * What every part of one drawn widget shares: built by render() (render.js) for each view of a
 * widget, handed to its unit's `setup(frame)`.
 *
 * @typedef {object} Frame
 * @property {object} model     the widget's model (anywidget's): `get(name)` of the saved traits
 *   (`payload`, `view`, `inputs`, `error`, `kind`, ...), `set`, `save_changes`, `on`, `off`. Set by render().
 * @property {boolean} live     a kernel is there (Jupyter, VS Code, Colab): false on the book's website, whose
 *   page sets window.__attentionBookStaticPage. Set by render().
 * @property {function|null} local  on the website only: the widget's page computation for its model-bound
 *   controls, `local(inputs, saved, progress)` -> data or a Promise of data (the unit's `pageCompute(saved,
 *   model)`, null where the saved payload lacks what it needs or no WebAssembly runs the model; a model loaded
 *   on first use tells `progress(text)` how far it got). Null with a kernel. Set by render().
 * @property {boolean} canSend  a model-bound control can be answered: `live || Boolean(local)`. Where it is
 *   false the control is disabled and named in `offline`. Set by render().
 * @property {function} send    `send(name, value)`: a model-bound control's new value, to the kernel (`inputs`)
 *   or, on the website, to `local`. Set by render().
 * @property {function} setView `setView(patch)`: change what is shown (the `view`), redraw, and tell the
 *   kernel. Set by render().
 * @property {string} id        a unique id for this view's DOM ids (checkbox labels). Set by render().
 * @property {object} view      what is shown now (a copy of the model's `view`, kept by setView). Set by render().
 * @property {object} inputs    on the website, the inputs last computed here. Set by render(), staticSend.
 * @property {string} [shownSource]  chapter 6: the source whose decoding is shown (its view rule). render().
 * @property {{control: string, message: string}|null} error  on the website, the last refusal of `local`.
 * @property {function} colour  weight 0..1 -> CSS colour, the book's colour map (`colour.table`: 256 RGB
 *   steps as bytes). Set by render() from the model's `palette`.
 * @property {HTMLElement} controls  the row of controls; the unit's setup adds its own. Set by render().
 * @property {HTMLElement} picture   the box the SVG is drawn in. Set by render().
 * @property {Object<string, HTMLElement>} errors  control name -> where its error is shown (kit.js, control()).
 * @property {string[]} offline  what the disabled controls would do ("edit the sentence"): the note under
 *   the widget names them. Added to by textInput() and the units' setup.
 * @property {string} [offlineNote]  a note that replaces that one (chapter 7's head viewer: what its menu and
 *   its box do on the website). Set by its setup.
 * @property {{narrow: boolean, width: number, key: string}} layout  the picture's layout for the box's width,
 *   set by render() before each draw (pictures.js, pictureLayout).
 * @property {SVGSVGElement} svg  the picture drawn last; `unplaced` while not yet in the page. Set by
 *   newPicture() (pictures.js), placed by placePicture().
 * @property {number} [sentAt]  when the last model-bound value was sent (performance.now()). Set by send().
 */

export const SVG_NS = "http://www.w3.org/2000/svg";

export function make(tag, attributes, parent, text) {
  const svg = tag.startsWith("svg:");
  const node = svg ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, String(value));
  }
  if (text !== undefined) node.textContent = String(text);
  if (parent) parent.appendChild(node);
  return node;
}

export function fixed(value, digits) {
  return value === null || value === undefined || !Number.isFinite(value) ? "–" : Number(value).toFixed(digits);
}

export function shorten(label, limit) {
  label = String(label);
  return label.length <= limit ? label : `${label.slice(0, limit - 1)}…`;
}

// -- colours: the book's one attention colour map, sent by Python as hex stops -----------
export function makePalette(stops) {
  const rgb = stops.map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
  function mix(value) {
    const x = Math.min(1, Math.max(0, value)) * (rgb.length - 1);
    const i = Math.min(rgb.length - 2, Math.floor(x));
    const f = x - i;
    return rgb[i].map((v, k) => Math.round(v + f * (rgb[i + 1][k] - v)));
  }
  function colour(value) {
    if (value === null || value === undefined || !Number.isFinite(value)) return "#e4e4e4";
    const c = mix(value);
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }
  // 256 steps as bytes, for pictures painted pixel by pixel (imageOf).
  colour.table = new Uint8Array(256 * 3);
  for (let k = 0; k < 256; k += 1) colour.table.set(mix(k / 255), 3 * k);
  return colour;
}

export function inkOn(value) {
  return value !== null && value > 0.6 ? "#000" : "#fff"; // light cells (high weights) take black text
}

export const STYLE = `
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
.ab-error.ab-busy { color: #555; font-style: italic; }
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

export function addStyle() {
  if (document.getElementById("attention-book-widget-style")) return;
  make("style", { id: "attention-book-widget-style" }, document.head, STYLE);
}

// -- controls ------------------------------------------------------------------------------
export function control(frame, name, label) {
  const wrapper = make("span", { class: "ab-control", "data-control": name }, frame.controls);
  if (label) make("label", {}, wrapper, label);
  const error = make("span", { class: "ab-error", "data-error-for": name });
  frame.errors[name] = error;
  return { wrapper, error };
}

export function placeError(wrapper, error) {
  wrapper.after(error);
}

export function slider(frame, name, label, { min, max, step, value, show, onInput, onCommit }) {
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

export function select(frame, name, label, options, value, onChange) {
  // One option: a label instead of a menu with nothing to choose.
  const { wrapper, error } = control(frame, name, label);
  let menu = null;
  function fill(list, current) {
    wrapper.querySelectorAll("select, .ab-only").forEach((node) => node.remove());
    if (list.length === 1) {
      make("span", { class: "ab-only", "data-name": name }, wrapper, list[0][0]);
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

export function checkbox(frame, name, label, value, onChange) {
  const { wrapper, error } = control(frame, name);
  const input = make("input", { type: "checkbox", name, id: `${frame.id}-${name}` }, wrapper);
  input.checked = value;
  make("label", { for: `${frame.id}-${name}` }, wrapper, label);
  placeError(wrapper, error);
  input.addEventListener("change", () => onChange(input.checked));
  return { input };
}

export function button(frame, name, text, onClick) {
  const b = make("button", { type: "button", name }, frame.controls, text);
  b.addEventListener("click", onClick);
  return b;
}

// A control that needs the kernel (a new sentence, source, query text): on the website it
// is disabled and a note says where it works, unless this file computes its numbers there
// (frame.canSend: see STATIC_COMPUTE).
export function textInput(frame, name, label, value, what, { offline = false } = {}) {
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

// The kernel's numbers, parsed once per new payload; on the website, the numbers this page
// computed last (staticSend) replace the saved ones.
export const parsed = new WeakMap();
export const computedHere = new WeakMap();
export function dataOf(model) {
  if (computedHere.has(model)) return computedHere.get(model);
  const text = model.get("payload");
  const cached = parsed.get(model);
  if (cached && cached.text === text) return cached.data;
  const data = JSON.parse(text);
  parsed.set(model, { text, data });
  return data;
}
