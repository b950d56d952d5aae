// Draws saved widgets in node, without a browser or a kernel, for tests/widgets/test_drawing.py.
//
//   node tests/widgets/draw_widgets.mjs MODULE < cases.json > drawn.json
//
// MODULE is the one ES module the widgets serve (attention_book.widgets._base.widget_module_source(),
// written to a file). Each case is { state, width, live }: a widget's saved state (as a chapter saves
// it, without `_esm`), the width in CSS pixels its picture gets (under 600: the narrow layout) and
// whether a kernel is there (false: the website's page). The DOM is happy-dom's; it lays nothing out,
// so the picture's width is given here, and a canvas (chapter 5's pictures) is a stand-in whose data
// URL names a hash of its pixels. Each answer says what was drawn: the cells with a number, the bars
// with a height, the pictures, every text, the messages, and the widget's whole HTML.
import { createHash } from "node:crypto";
import { Window } from "happy-dom";

const window = new Window({ url: "http://localhost/" });
for (const name of ["window", "document", "navigator", "HTMLElement", "Node", "Blob"]) {
  if (!(name in globalThis) || name === "window" || name === "document") globalThis[name] = window[name] ?? window;
}
globalThis.window = window;
globalThis.document = window.document;

let pictureWidth = 660;
Object.defineProperty(window.HTMLElement.prototype, "clientWidth", {
  configurable: true,
  get() {
    return this.classList.contains("ab-picture") ? pictureWidth : 0;
  },
});

// A canvas that remembers its pixels: toDataURL() names their hash, so the test sees what was painted.
class Context {
  constructor(canvas) {
    this.canvas = canvas;
  }
  createImageData(width, height) {
    return { width, height, data: new Uint8ClampedArray(4 * width * height) };
  }
  putImageData(image) {
    this.canvas.pixels = image;
  }
}
window.HTMLCanvasElement.prototype.getContext = function getContext() {
  return new Context(this);
};
window.HTMLCanvasElement.prototype.toDataURL = function toDataURL() {
  const image = this.pixels;
  if (!image) return "data:,";
  const hash = createHash("sha1").update(image.data).digest("hex").slice(0, 16);
  return `data:image/x-pixels;${image.width}x${image.height};${hash}`;
};

function fakeModel(state) {
  const values = { ...state };
  return {
    get: (name) => values[name],
    set: (name, value) => {
      values[name] = value;
    },
    save_changes: () => {},
    on: () => {},
    off: () => {},
  };
}

function summary(el) {
  for (const timing of ["drawnAt", "drawMs", "roundTripMs"]) delete el.dataset[timing]; // times differ run to run
  const svg = el.querySelector(".ab-picture svg");
  const texts = svg ? [...svg.querySelectorAll("text")].map((node) => node.textContent) : [];
  const rects = svg ? [...svg.querySelectorAll("rect")] : [];
  return {
    viewBox: svg ? svg.getAttribute("viewBox") : null,
    cells: rects.filter((rect) => rect.hasAttribute("data-row") && rect.getAttribute("data-value")).length,
    bars: rects.filter(
      (rect) =>
        rect.hasAttribute("data-col") && !rect.hasAttribute("data-row") && Number(rect.getAttribute("height")) > 0,
    ).length,
    images: svg ? [...svg.querySelectorAll("image")].map((image) => image.getAttribute("href")) : [],
    texts,
    controls: [...el.querySelectorAll("[data-control]")].map((node) => node.getAttribute("data-control")),
    disabled: [...el.querySelectorAll("input:disabled, select:disabled")].map((node) => node.getAttribute("name")),
    note: el.querySelector(".ab-note")?.textContent || "",
    errors: [...el.querySelectorAll(".ab-error")].map((node) => node.textContent).filter(Boolean),
    frames: Number(el.dataset.frames),
    html: el.outerHTML,
  };
}

const module = await import(process.argv[2]);
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const cases = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const answers = [];
for (const { state, width, live } of cases) {
  pictureWidth = width;
  window.__attentionBookStaticPage = !live;
  const el = document.createElement("div");
  document.body.appendChild(el);
  try {
    module.default.render({ model: fakeModel(state), el });
    answers.push(summary(el));
  } catch (error) {
    answers.push({ crash: String(error?.stack) });
  }
  el.remove();
}
process.stdout.write(JSON.stringify(answers));
await window.happyDOM.close();
