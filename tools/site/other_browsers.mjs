// The built website's widgets in Firefox, checked against Chromium (issue 35): for each control that
// computes in the page (chapter 1's sentence, 2's query, 3's scores, 4's sentence and 6's sources run
// through onnxruntime-web, 5's d_model), chapter 7's menu of sentences computed at build time and its typed
// sentence (MiniLM, from the UTF-16 script in page-models/, added on the first sentence typed), the
// same input is given in both browsers, from file:// URLs, and what each draws is compared: every
// matrix cell's value (data-value), every bar, every text of the picture and the message shown.
// The Chromium site tests compare Chromium with the Python reference; this compares Firefox with
// Chromium. It is not part of `make test` (CI has no Firefox); run it by hand after `make book`:
//
//   apt-get install firefox-esr                      # Debian; any Firefox 113+ (DecompressionStream)
//   npm install --no-save puppeteer-core@24.43.1     # drives Firefox over WebDriver BiDi, no download
//   node tools/site/other_browsers.mjs _build/html [/usr/bin/firefox-esr] [/usr/bin/chromium]
//
// It prints one line per input and exits 1 when any differs.
import path from "node:path";
import puppeteer from "puppeteer-core";

const [site, firefox = "/usr/bin/firefox-esr", chromium = "/usr/bin/chromium"] = process.argv.slice(2);
if (!site) {
  console.error("usage: node tools/site/other_browsers.mjs SITE_DIR [FIREFOX] [CHROMIUM]");
  process.exit(2);
}
// chapter, widget kind, which of that kind on the page, control, how it is set, value
const CASES = [
  ["01_attention_math", "attention", 0, "sentence", "text", "bank the river"],
  ["01_attention_math", "attention", 0, "sentence", "text", "the river bank was steep"],
  ["01_attention_math", "attention", 0, "sentence", "text", ""],
  ["02_key_value_store", "key_value", 0, "query", "text", "10, 0, 0"],
  ["02_key_value_store", "key_value", 0, "query", "text", "a b c"],
  ["03_soft_vs_hard", "soft_hard", 0, "scores", "text", "a=1, b=2, c=3"],
  ["04_multi_head", "heads", 0, "sentence", "text", "a1 c3 b0 a2 d1"],
  ["04_multi_head", "heads", 0, "sentence", "text", "a1 zz"],
  ["05_positional_encoding", "positional", 0, "d_model", "range", "8"],
  ["06_encoder_decoder", "decoding", 0, "source", "text", "C A F B"],
  ["06_encoder_decoder", "decoding", 1, "source", "text", "tuesday 3rd of march 1998"],
  ["06_encoder_decoder", "decoding", 1, "source", "text", "ÿ"],
  ["07_transfer_learning", "heads", 0, "example", "select", "Great!"],
  ["07_transfer_learning", "heads", 0, "example", "select", "The acting is not bad at all."],
  // chapter 7's typed sentence: MiniLM from the script the site serves beside the page (issue 46)
  ["07_transfer_learning", "heads", 0, "sentence", "text", "A cat sat on the mat."],
  ["07_transfer_learning", "heads", 0, "sentence", "text", "Café naïve résumé, 猫 [MASK]"],
];

// In the page: waits for the widgets, gives the input, waits for the answer, reads the picture back.
async function giveAndRead([kind, index, name, how, value]) {
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const start = performance.now();
  while (!document.querySelector(".ab-widget") ||
    document.querySelectorAll(".ab-widget[data-frames]").length < document.querySelectorAll(".ab-widget").length) {
    if (performance.now() - start > 30000) return { problem: "the widgets were not drawn" };
    await sleep(100);
  }
  const widget = document.querySelectorAll(`.ab-widget[data-kind="${kind}"]`)[index];
  const input = widget && widget.querySelector(`[name="${name}"]`);
  if (!input || input.disabled) return { problem: `no usable control ${name}` };
  delete widget.dataset.roundTripMs;
  const frames = Number(widget.dataset.frames);
  const sent = performance.now();
  input.value = how === "select" ? JSON.stringify(value) : value;
  input.dispatchEvent(new Event("input", { bubbles: true }));
  input.dispatchEvent(new Event("change", { bubbles: true }));
  // a typed input answers with data-round-trip-ms; a slider redraws at once (data-frames)
  while (how === "range" ? Number(widget.dataset.frames) === frames : widget.dataset.roundTripMs === undefined) {
    if (performance.now() - sent > 60000) return { problem: "no answer in 60 s" };
    await sleep(2);
  }
  const ms = performance.now() - sent;
  const svg = widget.querySelector(".ab-picture svg");
  return {
    ms,
    cells: Array.from(svg.querySelectorAll("rect[data-value]"), (r) => r.dataset.value),
    bars: Array.from(svg.querySelectorAll("rect[data-col]"), (r) => r.getAttribute("height")),
    texts: Array.from(svg.querySelectorAll("text"), (t) => t.textContent),
    message: Array.from(widget.querySelectorAll(".ab-error"), (e) => e.textContent).join(""),
    features: { WebAssembly: typeof WebAssembly, DecompressionStream: typeof DecompressionStream },
  };
}

async function run(browserName, executablePath) {
  const asRoot = process.getuid && process.getuid() === 0;  // Chromium's sandbox refuses root
  const args = browserName === "chrome" && asRoot ? ["--no-sandbox"] : [];
  const browser = await puppeteer.launch({ browser: browserName, executablePath, headless: true, args });
  const page = await browser.newPage();
  const errors = [];
  page.on("console", (message) => message.type() === "error" && errors.push(message.text()));
  page.on("pageerror", (error) => errors.push(String(error)));
  const answers = [];
  let open = null;
  for (const [chapter, ...input] of CASES) {
    if (open !== chapter) {
      await page.goto(`file://${path.resolve(site, "notebooks", `${chapter}.html`)}`, { waitUntil: "load", timeout: 60000 });
      open = chapter;
    }
    answers.push(await page.evaluate(giveAndRead, input));
  }
  const version = await browser.version();
  await browser.close();
  return { version, answers, errors };
}

const numbers = (list) => (list || []).map((x) => (x === "" || x === null ? NaN : Number(x)));
function largestDifference(a, b) {
  if (a.length !== b.length) return Infinity;
  return a.reduce((most, x, i) => (Number.isNaN(x) && Number.isNaN(b[i]) ? most : Math.max(most, Math.abs(x - b[i]))), 0);
}

const [fox, chrome] = [await run("firefox", firefox), await run("chrome", chromium)];
let differ = 0;
CASES.forEach((input, k) => {
  const [f, c] = [fox.answers[k], chrome.answers[k]];
  const cells = largestDifference(numbers(f.cells), numbers(c.cells));
  const bars = largestDifference(numbers(f.bars), numbers(c.bars));
  const same = !f.problem && !c.problem && cells <= 1e-4 && bars <= 1e-3 &&
    JSON.stringify(f.texts) === JSON.stringify(c.texts) && f.message === c.message;
  differ += same ? 0 : 1;
  const what = f.problem || c.problem ? `${f.problem || ""} ${c.problem || ""}` :
    `${f.cells.length} cells (largest difference ${cells}), ${f.bars.length} bars (${bars}), ${f.texts.length} texts` +
    `${JSON.stringify(f.texts) === JSON.stringify(c.texts) ? "" : " (texts differ)"}; ` +
    `Firefox ${f.ms.toFixed(0)} ms, Chromium ${c.ms.toFixed(0)} ms${f.message ? `; says ${JSON.stringify(f.message)}` : ""}` +
    `${f.message !== c.message ? ` but Chromium says ${JSON.stringify(c.message)}` : ""}`;
  console.log(`${same ? "same" : "DIFFERENT"}  ${input[0]} ${input[4]} ${JSON.stringify(input[5])}: ${what}`);
});
console.log(`${fox.version} (${JSON.stringify(fox.answers[0].features || {})}), console errors: ${fox.errors.length ? fox.errors.join(" | ") : "none"}`);
console.log(`${chrome.version}, console errors: ${chrome.errors.length ? chrome.errors.join(" | ") : "none"}`);
console.log(differ ? `${differ} of ${CASES.length} inputs drawn differently` : `all ${CASES.length} inputs drawn alike`);
process.exit(differ ? 1 : 0);
