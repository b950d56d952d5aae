import { make } from "./kit.js";

// onnxruntime-web, loaded once per page on first use: the site serves it as one classic script
// (tools/site/build_book.py, _copy_onnxruntime; its URL set by tools/site/widgets_offline.js)
// holding the runtime's ES module and its WebAssembly binary, gzip-compressed, as text.
let onnxRuntime = null;
export function loadOnnxRuntime() {
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
