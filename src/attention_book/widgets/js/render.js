// How one widget is drawn: render({ model, el }), anywidget's entry point, builds the frame (kit.js,
// Frame) and the parts every widget has (title, controls, picture, footer, note), hands the frame to
// its unit (one per widget kind, 01_attention.js ... 06_decoding.js), and redraws when the kernel,
// the page's own computation or the width of the box asks for it.

import { attentionUnit } from "./01_attention.js";
import { keyValueUnit } from "./02_key_value.js";
import { softHardUnit } from "./03_soft_hard.js";
import { headUnit } from "./04_heads.js";
import { positionalUnit } from "./05_positional.js";
import { decodingUnit } from "./06_decoding.js";
import { addStyle, computedHere, dataOf, make, makePalette } from "./kit.js";
import { fitLabels, pictureLayout, placePicture } from "./pictures.js";
import { WidgetInputError } from "./python.js";

// The widget kinds, each one object: { kind, setup(frame) -> draw(), pageCompute(saved, model) -> the
// website's computation or null, adjustView(frame, data, value): the twin of its AttentionWidget.adjust_view }.
const UNITS = Object.fromEntries(
  [attentionUnit, keyValueUnit, softHardUnit, headUnit, positionalUnit, decodingUnit].map((unit) => [unit.kind, unit]),
);

let widgetCount = 0;

function newFrame(model) {
  const live = !(typeof window !== "undefined" && window.__attentionBookStaticPage);
  widgetCount += 1;
  const frame = {
    model,
    live,
    id: `ab-widget-${widgetCount}`,
    errors: {},
    offline: [],
    view: Object.assign({}, model.get("view")),
    colour: makePalette(model.get("palette")),
  };
  // Without a kernel, the controls of the kinds with a page computation compute here (frame.local).
  const { pageCompute } = UNITS[model.get("kind")];
  frame.local = live || !pageCompute ? null : pageCompute(dataOf(model), model);
  frame.canSend = live || Boolean(frame.local);
  frame.inputs = Object.assign({}, model.get("inputs"));
  frame.shownSource = frame.inputs.source;
  frame.error = null;
  return frame;
}

// The device: a menu where there are several, else a label (only with a kernel: the website's page
// has none, and where the model runs matters only there).
function deviceControl(footer, model, live) {
  const devices = model.get("devices");
  if (devices.length === 1) {
    const name = devices[0] === "cpu" ? "device: cpu; no GPU found" : `device: ${devices[0]}`;
    if (live) make("span", { class: "ab-device" }, footer, name);
    return;
  }
  const wrapper = make("span", { class: "ab-control" }, footer);
  make("label", {}, wrapper, "device");
  const deviceMenu = make("select", { name: "device" }, wrapper);
  for (const d of devices) make("option", { value: d }, deviceMenu, d);
  deviceMenu.value = model.get("device_name");
  if (!live) deviceMenu.disabled = true;
  deviceMenu.addEventListener("change", () => {
    model.set("device_name", deviceMenu.value);
    model.save_changes();
  });
}

// The website's answer to a control (no kernel): what AttentionWidget.update does, here.
// frame.local answers with the data or, where a model runs (the head viewer), a Promise of
// it; only the answer to the latest input is shown. A model loaded on first use reports its
// stages through the third argument, `progress(text)`, shown beside the control until the answer.
function staticSend(widget, name, value) {
  const { frame, model, el } = widget;
  frame.inputs = Object.assign({}, frame.inputs, { [name]: value });
  const sentAt = frame.sentAt;
  function accept(data) {
    computedHere.set(model, data);
    frame.error = null;
    widget.unit.adjustView(frame, data, value);
    redraw(widget);
  }
  function refuse(error) {
    if (!(error instanceof WidgetInputError)) throw error;
    frame.error = { control: error.control || name, message: error.message };
  }
  function finish() {
    showError(widget);
    el.dataset.roundTripMs = String(performance.now() - sentAt);
  }
  // A model loaded on first use (chapter 7's) says how far it got, where the control's error shows.
  const progress = (text) => {
    const span = frame.errors[name];
    if (frame.sentAt !== sentAt || !span) return; // a newer input is on its way
    span.textContent = text;
    span.classList.toggle("ab-busy", Boolean(text));
  };
  let answer;
  try {
    answer = frame.local(frame.inputs, dataOf(model), progress);
    if (!(answer && typeof answer.then === "function")) accept(answer);
  } catch (error) {
    refuse(error);
  }
  if (answer && typeof answer.then === "function") {
    const latest = (handle) => (result) => {
      if (frame.sentAt !== sentAt) return; // a newer input is on its way
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

function redraw({ frame, el, draw }) {
  const start = performance.now();
  frame.layout = pictureLayout(frame);
  draw();
  placePicture(frame);
  fitLabels(frame.svg);
  el.dataset.frames = String(Number(el.dataset.frames) + 1);
  el.dataset.drawnAt = String(performance.now());
  el.dataset.drawMs = String(performance.now() - start); // the benchmark reports how much of a redraw is drawing
}

function showError({ frame, model, note }) {
  const error = frame.error || model.get("error") || {};
  for (const [name, span] of Object.entries(frame.errors)) {
    span.textContent = error.control === name ? `⚠ ${error.message}` : "";
    span.classList.remove("ab-busy");
  }
  frame.picture.classList.toggle("ab-stale", Boolean(error.message));
  if (error.message && !frame.errors[error.control]) note.textContent = `⚠ ${error.message}`;
}

function showNote({ frame, note }) {
  note.textContent =
    frame.offlineNote ||
    (frame.offline.length
      ? `On this page the numbers are fixed: open the chapter in Colab or Jupyter to ${frame.offline.join(" or ")}.`
      : "");
}

// frame.send and frame.setView: to the kernel where there is one, else to the page's own computation.
function connect(widget) {
  const { frame, model } = widget;
  frame.send = (name, value) => {
    frame.sentAt = performance.now();
    if (!frame.live) {
      staticSend(widget, name, value);
      return;
    }
    model.set("inputs", Object.assign({}, model.get("inputs"), { [name]: value }));
    model.save_changes();
  };
  frame.setView = (patch) => {
    Object.assign(frame.view, patch);
    redraw(widget);
    if (frame.live) {
      try {
        model.set("view", Object.assign({}, frame.view));
        model.save_changes();
      } catch {
        /* no kernel to tell: the picture is already drawn */
      }
    }
  };
}

// Redraws on the kernel's news (numbers, errors, status, a view set from Python) and on a new width;
// returns what stops listening.
function listen(widget) {
  const { frame, model, el } = widget;
  let observer = null;
  if (typeof ResizeObserver !== "undefined") {
    observer = new ResizeObserver(() => {
      // a new layout where the width crosses NARROW_PX, else the labels fitted
      if (pictureLayout(frame).key !== frame.layout.key) redraw(widget);
      else fitLabels(frame.svg);
    });
    observer.observe(frame.picture);
  }
  const roundTrip = () => {
    if (frame.sentAt !== undefined) el.dataset.roundTripMs = String(performance.now() - frame.sentAt);
  };
  const handlers = {
    "change:payload": () => {
      frame.view = Object.assign({}, frame.view, model.get("view"));
      redraw(widget);
      showError(widget);
      roundTrip();
    },
    "change:error": () => {
      showError(widget);
      roundTrip();
    },
    "change:status": () => {
      widget.status.textContent = model.get("status");
    },
    "change:view": () => {
      // the view set from Python (widget.set_view(...) in a cell)
      const view = model.get("view");
      if (JSON.stringify(view) !== JSON.stringify(frame.view)) {
        frame.view = Object.assign({}, frame.view, view);
        redraw(widget);
      }
    },
  };
  for (const [event, handler] of Object.entries(handlers)) model.on(event, handler);
  return () => {
    if (observer) observer.disconnect();
    for (const [event, handler] of Object.entries(handlers)) model.off(event, handler);
  };
}

function render({ model, el }) {
  addStyle();
  el.classList.add("ab-widget", "jupyter-widgets"); // the class every rendered Jupyter widget carries
  el.dataset.kind = model.get("kind");
  el.dataset.frames = "0";
  const frame = newFrame(model);
  make("div", { class: "ab-title" }, el, model.get("title"));
  frame.controls = make("div", { class: "ab-controls" }, el);
  frame.picture = make("div", { class: "ab-picture" }, el);
  make("div", { class: "ab-stale-note" }, frame.picture, "stale: shows the last input that worked");
  const footer = make("div", { class: "ab-footer" }, el);
  deviceControl(footer, model, frame.live);
  const status = make("span", { class: "ab-status" }, footer, frame.live ? model.get("status") : "");
  const note = make("div", { class: "ab-note" }, el);
  const widget = { frame, model, el, status, note, unit: UNITS[model.get("kind")], draw: null };
  connect(widget);
  widget.draw = widget.unit.setup(frame);
  redraw(widget);
  showNote(widget);
  showError(widget);
  return listen(widget);
}

export default { render };
