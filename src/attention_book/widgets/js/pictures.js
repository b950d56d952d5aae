// -- drawing pieces ------------------------------------------------------------------------
// Labels are never drawn under MIN_LABEL_PX screen pixels where they have room: when the picture is
// scaled down (a phone), a label whose declared size would fall under it gets a larger size in the
// picture's units; a matrix's row and column labels grow only as far as their row or column pitch
// (data-pitch) allows, so they never overlap; a label that would then run out of the picture (or
// out of the width data-room its panel gives it) shrinks back until it fits; a number inside a matrix cell that would fall under it is hidden (the cell's
// colour stays).
import { fixed, inkOn, make } from "./kit.js";

export const MIN_LABEL_PX = 9;
export function fitLabels(svg) {
  if (!svg?.viewBox?.baseVal?.width) return;
  const shown = svg.getBoundingClientRect().width;
  if (!shown) return; // not laid out yet (a hidden tab): the resize observer calls again
  const box = svg.viewBox.baseVal;
  const scale = shown / box.width;
  const floor = MIN_LABEL_PX / scale; // the smallest legible size, in the picture's units
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
      const room = parseFloat(text.dataset.room); // the width a centred panel title may take
      const over = Math.max(
        bounds.x + bounds.width - (box.x + box.width),
        box.x - bounds.x,
        Number.isFinite(room) ? bounds.width - room : 0,
      );
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
export function newPicture(frame, width, height) {
  const svg = make("svg:svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "font-size": 12 });
  frame.svg = svg;
  frame.unplaced = svg;
  return svg;
}

export function placePicture(frame) {
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
export const NARROW_PX = 600; // a phone, or a tablet upright; a desktop column gives about 650
export function pictureLayout(frame) {
  const px = frame.picture.clientWidth; // 0 while hidden (a closed tab): the wide layout until it shows
  if (!px || px >= NARROW_PX) return { narrow: false, width: 660, key: "wide" };
  const width = Math.max(240, 8 * Math.floor(px / 8));
  return { narrow: true, width, key: `narrow-${width}` };
}

// Words of `text` on lines of at most `width` units at `font` (a character estimated at 0.58 font,
// 0.64 in bold, 0.62 in monospace).
export function wrapLines(text, width, font, { monospace, bold } = {}) {
  const perLine = Math.max(8, Math.floor(width / (font * (monospace ? 0.62 : bold ? 0.64 : 0.58))));
  const lines = [];
  for (const word of String(text).split(" ")) {
    const last = lines.length ? lines[lines.length - 1] : null;
    if (last !== null && `${last} ${word}`.length <= perLine) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  return lines;
}

// Writes `text` into an SVG text element, wrapped onto lines (tspans) when `width` is given.
export function writeText(node, text, width) {
  if (!width) {
    node.textContent = text;
    return 1;
  }
  while (node.firstChild) node.firstChild.remove();
  const font = parseFloat(node.getAttribute("font-size")) || 12;
  const lines = wrapLines(text, width, font, {
    monospace: node.getAttribute("font-family") === "monospace",
    bold: node.getAttribute("font-weight") === "bold",
  });
  lines.forEach((line, k) =>
    make("svg:tspan", { x: node.getAttribute("x"), dy: k ? (font * 1.25).toFixed(1) : 0 }, node, line),
  );
  return lines.length;
}

// A heatmap of SVG rectangles: set(matrix) recolours; rows are queries, columns keys.
// Hovering a cell or a label highlights its row and column (the rest fades). With `every` = k > 1
// (cells too small for a legible label each) only every k-th row and column is labelled; the
// others' labels show while their row or column is pointed at.
export function heatmap(parent, colour, options) {
  const map = { ...options, font: options.font || 11, every: options.every || 1 };
  const g = make("svg:g", { class: "ab-heatmap" }, parent);
  const { rects, texts } = heatmapCells(g, map);
  const rowText = heatmapRowLabels(g, map);
  const colText = heatmapColumnLabels(g, map);
  heatmapTitles(g, map);
  const { x, y, cell, cols } = map;
  const outline = make(
    "svg:rect",
    {
      x,
      y,
      width: cols * cell,
      height: cell,
      fill: "none",
      stroke: "#d62728",
      "stroke-width": 2.5,
      visibility: "hidden",
    },
    g,
  );
  const focus = heatmapFocus(map, rects, rowText, colText);
  g.addEventListener("mouseover", (event) => {
    const target = event.target;
    const row = target.hasAttribute("data-row") ? Number(target.getAttribute("data-row")) : null;
    const col = target.hasAttribute("data-col") ? Number(target.getAttribute("data-col")) : null;
    if (row !== null || col !== null) focus(row, col === null ? row : col);
  });
  g.addEventListener("mouseleave", () => focus(null, null));
  if (map.onRowClick) rowText.forEach((t, i) => t.addEventListener("click", () => map.onRowClick(i)));
  return heatmapHandle({ ...map, colour }, { rects, texts, outline, rowText, colText });
}

// The cells (and, with `numbers`, a number in each), row by row.
function heatmapCells(g, { x, y, cell, rows, cols, numbers, font }) {
  const rects = [];
  const texts = [];
  for (let i = 0; i < rows; i += 1) {
    rects.push([]);
    texts.push([]);
    for (let j = 0; j < cols; j += 1) {
      const r = make(
        "svg:rect",
        { x: x + j * cell, y: y + i * cell, width: cell, height: cell, fill: "#e4e4e4", "data-row": i, "data-col": j },
        g,
      );
      rects[i].push(r);
      if (numbers) {
        texts[i].push(
          make(
            "svg:text",
            {
              x: x + (j + 0.5) * cell,
              y: y + (i + 0.5) * cell + font * 0.35,
              "text-anchor": "middle",
              "font-size": Math.min(font, cell * 0.36),
              "pointer-events": "none",
              class: "ab-cell-number",
            },
            g,
            "",
          ),
        );
      }
    }
  }
  return { rects, texts };
}

function heatmapRowLabels(g, { x, y, cell, rowLabels, font, onRowClick, every }) {
  return (rowLabels || []).map((label, i) =>
    make(
      "svg:text",
      {
        x: x - 4,
        y: y + (i + 0.5) * cell + font * 0.35,
        "text-anchor": "end",
        "font-size": font,
        "data-row": i,
        "data-pitch": (cell * 0.95 * every).toFixed(2),
        class: i % every ? "ab-row-label ab-label-rest" : "ab-row-label",
        style: onRowClick ? "cursor:pointer" : "",
      },
      g,
      label,
    ),
  );
}

function heatmapColumnLabels(g, { x, y, cell, rows, colLabels, font, every }) {
  return (colLabels || []).map((label, j) => {
    const cx = x + (j + 0.5) * cell;
    const cy = y + rows * cell + 4;
    return make(
      "svg:text",
      {
        x: cx,
        y: cy,
        transform: `rotate(-55 ${cx} ${cy})`,
        "text-anchor": "end",
        "dominant-baseline": "hanging",
        "font-size": font,
        "data-col": j,
        "data-pitch": (cell * 0.8 * every).toFixed(2),
        class: j % every ? "ab-label-rest" : null,
      },
      g,
      label,
    );
  });
}

function heatmapTitles(g, { x, y, cell, rows, cols, rowLabels, xTitle, yTitle, font }) {
  if (xTitle)
    make(
      "svg:text",
      {
        x: x + (cols * cell) / 2,
        y: y - 6,
        "text-anchor": "middle",
        "font-size": font,
        "data-room": (cols * cell + 16).toFixed(2),
      },
      g,
      xTitle,
    );
  if (yTitle) {
    const tx = x - 4 - Math.max(0, ...(rowLabels || [""]).map((l) => String(l).length)) * font * 0.58 - 8;
    const ty = y + (rows * cell) / 2;
    make(
      "svg:text",
      { x: tx, y: ty, transform: `rotate(-90 ${tx} ${ty})`, "text-anchor": "middle", "font-size": font },
      g,
      yTitle,
    );
  }
}

// focus(row, col): that row and column in full colour, the rest faded, their labels bold (and shown).
function heatmapFocus({ rows, cols, every }, rects, rowText, colText) {
  return function focus(row, col) {
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
  };
}

// What a widget does with a drawn heatmap: set its numbers, mark a row, rename a row or a column.
function heatmapHandle({ y, cell, rows, cols, numbers, colour }, { rects, texts, outline, rowText, colText }) {
  return {
    set(matrix) {
      for (let i = 0; i < rows; i += 1) {
        for (let j = 0; j < cols; j += 1) {
          const v = matrix[i] ? matrix[i][j] : null;
          rects[i][j].setAttribute("fill", colour(v));
          rects[i][j].setAttribute("data-value", v === null || v === undefined ? "" : String(v)); // the number drawn (tests read it)
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
export function colourBar(parent, colour, { x, y, height, width, label }) {
  const g = make("svg:g", {}, parent);
  const steps = 20;
  if (width) {
    for (let k = 0; k < steps; k += 1) {
      make(
        "svg:rect",
        { x: x + (width * k) / steps, y, width: width / steps + 0.5, height: 10, fill: colour(k / (steps - 1)) },
        g,
      );
    }
    for (const v of [0, 0.5, 1])
      make("svg:text", { x: x + width * v, y: y + 23, "text-anchor": "middle", "font-size": 10 }, g, v.toFixed(1));
    if (label) make("svg:text", { x: x + width + 8, y: y + 9, "font-size": 10 }, g, label);
    return;
  }
  for (let k = 0; k < steps; k += 1) {
    make(
      "svg:rect",
      { x, y: y + (height * k) / steps, width: 10, height: height / steps + 0.5, fill: colour(1 - k / (steps - 1)) },
      g,
    );
  }
  for (const v of [0, 0.5, 1])
    make("svg:text", { x: x + 14, y: y + height * (1 - v) + 4, "font-size": 10 }, g, v.toFixed(1));
  if (label) {
    const tx = x + 40;
    const ty = y + height / 2;
    make(
      "svg:text",
      { x: tx, y: ty, transform: `rotate(-90 ${tx} ${ty})`, "text-anchor": "middle", "font-size": 11 },
      g,
      label,
    );
  }
}

// Vertical bars with an axis 0..1: set(values, labelsAbove, colours).
export function barChart(parent, { x, y, width, height, labels, yLabel, font }) {
  font = font || 11;
  const g = make("svg:g", {}, parent);
  const plot = height - 16; // room for the labels written above the bars
  barAxes(g, { x, y, width, height, yLabel, font });
  const { bars, above } = barsOf(g, { x, y, width, height, labels, font });
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

function barAxes(g, { x, y, width, height, yLabel, font }) {
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
    make(
      "svg:text",
      { x: tx, y: ty, transform: `rotate(-90 ${tx} ${ty})`, "text-anchor": "middle", "font-size": font },
      g,
      yLabel,
    );
  }
}

// One bar per label (height 0 until set), a text above it and the label under it.
function barsOf(g, { x, y, width, height, labels, font }) {
  const n = labels.length;
  const slot = width / n;
  const bars = [];
  const above = [];
  labels.forEach((label, j) => {
    const bx = x + j * slot + slot * 0.15;
    bars.push(
      make(
        "svg:rect",
        { x: bx, y: y + height, width: slot * 0.7, height: 0, stroke: "#000", "stroke-width": 0.8, "data-col": j },
        g,
      ),
    );
    above.push(
      make(
        "svg:text",
        { x: bx + slot * 0.35, y: y + height - 3, "text-anchor": "middle", "font-size": Math.min(10, font) },
        g,
        "",
      ),
    );
    const cx = bx + slot * 0.35;
    const cy = y + height + 5;
    const rotate = n > 6 || Math.max(...labels.map((l) => String(l).length)) * font * 0.6 > slot;
    make(
      "svg:text",
      {
        x: cx,
        y: cy,
        transform: rotate ? `rotate(-35 ${cx} ${cy})` : null,
        "text-anchor": rotate ? "end" : "middle",
        "dominant-baseline": "hanging",
        "font-size": font,
      },
      g,
      label,
    );
  });
  return { bars, above };
}
