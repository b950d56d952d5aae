import { make } from "./kit.js";

// A classic script added to the page once (a page opened from file:// may run one, but may neither fetch a
// file nor import a module file); resolves when it has run.
const classicScripts = new Map(); // URL -> Promise
export function loadClassicScript(url) {
  let loaded = classicScripts.get(url);
  if (!loaded) {
    loaded = new Promise((resolve, reject) => {
      const script = make("script", { src: url });
      script.onload = resolve;
      script.onerror = () => reject(new Error(`${url} did not load`));
      document.head.appendChild(script);
    });
    classicScripts.set(url, loaded);
    loaded.catch(() => classicScripts.delete(url)); // the next try adds it again
  }
  return loaded;
}

// gzip-compressed bytes, unpacked by the browser (DecompressionStream).
export async function gunzip(bytes) {
  const unpacked = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(unpacked).arrayBuffer());
}

// onnxruntime-web, loaded once per page on first use: the site serves it as one classic script
// (tools/site/build_book.py, _copy_onnxruntime; its URL set by tools/site/widgets_offline.js)
// holding the runtime's ES module and its WebAssembly binary, gzip-compressed, as text.
let onnxRuntime = null;
export function loadOnnxRuntime() {
  if (onnxRuntime) return onnxRuntime;
  onnxRuntime = (async () => {
    const url = typeof window !== "undefined" ? window.__attentionBookOnnxRuntimeScript : undefined;
    if (!url) throw new Error("this page does not serve onnxruntime-web");
    if (!window.__attentionBookOnnxRuntime) await loadClassicScript(url);
    const files = window.__attentionBookOnnxRuntime;
    const moduleUrl = URL.createObjectURL(new Blob([files.module], { type: "text/javascript" }));
    const ort = await import(/* webpackIgnore: true */ moduleUrl);
    ort.env.wasm.wasmBinary = (await gunzip(base64Bytes(files.wasmGzipBase64))).buffer;
    ort.env.wasm.numThreads = 1; // a page opened from file:// is not cross-origin isolated: no threads
    ort.env.wasm.proxy = false;
    return ort;
  })();
  onnxRuntime.catch(() => {
    onnxRuntime = null; // the next sentence tries again
  });
  return onnxRuntime;
}
export function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
export const onnxSessions = new Map(); // the model's base64 text -> Promise of { ort, session }
export function headSession(page) {
  let ready = onnxSessions.get(page.onnx);
  if (!ready) {
    ready = loadOnnxRuntime().then(async (ort) => ({
      ort,
      session: await ort.InferenceSession.create(base64Bytes(page.onnx)),
    }));
    onnxSessions.set(page.onnx, ready);
    ready.catch(() => onnxSessions.delete(page.onnx));
  }
  return ready;
}

// A model too large to save with the page (chapter 7's MiniLM: attention_book.widgets.pretrained_page; written
// by tools/site/page_models.py): one classic script in the site's page-models/ folder (its URL set by
// tools/site/widgets_offline.js), added when a reader first types and loaded beside onnxruntime-web. It
// stores under its name in window.__attentionBookPageModels `packed`, bytes 15 bits a character (unpack15),
// and `parts`, where each part lies in them: the tokenizer's rules and the layout of the weights (JSON), the
// ONNX graph, and the streams its large weights are made from (pageWeights). Resolves to { ort, session,
// rules }. Every caller's `progress(text)` hears each stage from the one it calls in, and "" when done.
const pageModels = new Map(); // script name -> { ready, stage, listeners }
export function loadPageModel(page, progress = () => {}) {
  let entry = pageModels.get(page.script);
  if (!entry) {
    entry = { stage: "", listeners: new Set() };
    const report = (text) => {
      entry.stage = text;
      for (const listener of entry.listeners) listener(text);
    };
    entry.ready = openPageModel(page, report);
    const settle = () => {
      report("");
      entry.listeners.clear();
    };
    entry.ready.then(settle, () => {
      pageModels.delete(page.script); // the next sentence tries again
      settle();
    });
    pageModels.set(page.script, entry);
  }
  if (entry.stage) progress(entry.stage);
  entry.listeners.add(progress);
  return entry.ready;
}

async function openPageModel(page, report) {
  const folder = typeof window !== "undefined" ? window.__attentionBookPageModelFolder : undefined;
  if (!folder) throw new Error("this page does not serve its models");
  report(`loading the model (${page.megabytes} MB, only for the first sentence)…`);
  const runtime = loadOnnxRuntime().then(warmedUp); // while the model's script loads
  const shelf = () => window.__attentionBookPageModels || {};
  if (!shelf()[page.script]) await loadClassicScript(`${folder}${page.script}`);
  const files = shelf()[page.script];
  if (!files) throw new Error(`${page.script} holds no model`);
  report("starting the model…");
  const parts = await unpackParts(files);
  const rules = JSON.parse(new TextDecoder().decode(parts.rules));
  const weights = pageWeights(rules, parts);
  const ort = await runtime;
  const session = await ort.InferenceSession.create(parts.graph, {
    externalData: [{ path: rules.file, data: weights }],
    graphOptimizationLevel: "disabled", // nothing to fold; measured no slower to run, faster to start
  });
  delete shelf()[page.script]; // tens of MB of text the page no longer needs
  return { ort, session, rules };
}

// onnxruntime-web's first session costs about 0.7 s more than the next ones (ONNX's operator schemas and
// the kernels registered, its code compiled): a model of one Identity node pays that while a large model
// loads (onnx.helper.make_model of x -> Identity -> y, float [1], opset 17, written out).
const IDENTITY_MODEL =
  "CAgSADo6ChAKAXgSAXkiCElkZW50aXR5EgR3YXJtWg8KAXgSCgoICAESBAoCCAFiDwoBeRIKCggIARIECgIIAUIECgAQEQ==";
async function warmedUp(ort) {
  const session = await ort.InferenceSession.create(base64Bytes(IDENTITY_MODEL));
  await session.run({ x: new ort.Tensor("float32", Float32Array.from([1]), [1]) });
  await session.release();
  return ort;
}

// The bytes of a text written by tools/site/page_models.py's pack15: each character is 0x3000 + the next 15 bits.
export function unpack15(text) {
  const bytes = new Uint8Array(Math.floor((text.length * 15) / 8));
  let bits = 0;
  let held = 0;
  let n = 0;
  for (let i = 0; i < text.length; i += 1) {
    held = (held << 15) | (text.charCodeAt(i) - 0x3000);
    bits += 15;
    while (bits >= 8) {
      bits -= 8;
      bytes[n] = (held >>> bits) & 255;
      n += 1;
    }
    held &= (1 << bits) - 1;
  }
  return bytes;
}

// A page model's parts ({ name: [offset, length, gzipped] } of the packed bytes), each unpacked.
export async function unpackParts(files) {
  const bytes = unpack15(files.packed);
  const parts = {};
  for (const [name, [offset, length, gzipped]] of Object.entries(files.parts)) {
    const part = bytes.subarray(offset, offset + length);
    parts[name] = gzipped ? await gunzip(part) : part;
  }
  return parts;
}

// The graph's external data (tools/site/page_models.py, page_parts): each tensor of rules.tensors at its offset, made
// from the streams high (int8), low (uint8) and steps (float32), read in order: a "matrix" is
// (high * 256 + low) * step, one step per column, rounded once to float32 (as torch computes it); "high",
// "low" and "steps" are copied (the embedding, which the graph turns back row by row).
export function pageWeights(rules, { high, low, steps }) {
  const weights = new Uint8Array(rules.size);
  const highs = new Int8Array(high.buffer, high.byteOffset, high.length);
  const stepValues = new Float32Array(steps.slice().buffer); // a copy: aligned for float32
  const at = { high: 0, low: 0, steps: 0 };
  for (const tensor of rules.tensors) {
    if (tensor.kind === "matrix") {
      const values = new Float32Array(weights.buffer, tensor.offset, tensor.count);
      const columns = tensor.columns;
      for (let k = 0; k < tensor.count; k += columns) {
        for (let j = 0; j < columns; j += 1) {
          values[k + j] = (highs[at.high + k + j] * 256 + low[at.low + k + j]) * stepValues[at.steps + j];
        }
      }
      at.high += tensor.count;
      at.low += tensor.count;
      at.steps += columns;
    } else if (tensor.kind === "steps") {
      weights.set(new Uint8Array(stepValues.buffer, at.steps * 4, tensor.count * 4), tensor.offset);
      at.steps += tensor.count;
    } else {
      const source = tensor.kind === "high" ? high : low;
      weights.set(source.subarray(at[tensor.kind], at[tensor.kind] + tensor.count), tensor.offset);
      at[tensor.kind] += tensor.count;
    }
  }
  return weights;
}

// An encoder's ONNX output `weights` (layers, heads, T, T), float32 row-major, as nested lists [l][h][i][j].
export function weightLists(output) {
  const [L, H, T] = output.dims;
  const values = output.data;
  return Array.from({ length: L }, (_, l) =>
    Array.from({ length: H }, (_, h) =>
      Array.from({ length: T }, (_, i) =>
        Array.from(values.subarray(((l * H + h) * T + i) * T, ((l * H + h) * T + i + 1) * T)),
      ),
    ),
  );
}
