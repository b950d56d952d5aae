/*
 * Lets the Jupyter widgets HTML manager work on the offline site (written for this book).
 * tools/site/build_book.py copies this file to vendor/; nb_ipywidgets_js in _config.yml loads
 * it before RequireJS and the widget manager on every page that embeds widgets.
 *
 * 1. Where the widget manager finds its files. Each module in the manager's bundle
 *    locates its font files relative to the URL RequireJS gives that module. Without
 *    configuration those URLs are relative to the page, so the fonts would be looked for
 *    next to each chapter. A global `require` object defined before RequireJS loads is
 *    RequireJS's configuration: map every module the bundle defines onto the
 *    html-manager folder next to this file, where tools/site/build_book.py put the fonts.
 *
 * 2. The book's own widgets (attention_book.widgets) are anywidgets: RequireJS finds
 *    anywidget's front end in the anywidget/ folder next to this file (copied there by
 *    tools/site/build_book.py), never on a CDN. The page has no kernel, which the widgets
 *    read from window.__attentionBookStaticPage: controls that would need the model are
 *    shown disabled, with a note (those whose numbers are plain arithmetic, such as chapter
 *    3's typed scores, widgets.js computes in the page instead; chapter 4's sentence and
 *    chapter 6's source run the chapter's model, saved as ONNX, with onnxruntime-web's
 *    WebAssembly build from onnxruntime-web/ next to this file; chapter 7's sentence runs its
 *    pretrained model from page-models/ next to this file, loaded on the first sentence typed).
 *
 * 3. MathJax. ipywidgets 8's manager typesets widget labels with MathJax 2's API,
 *    MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the site serves MathJax 3,
 *    which has no MathJax.Hub, so each widget view would throw while rendering. Give
 *    whichever object is window.MathJax (Sphinx's configuration first, then MathJax 3
 *    once it loads) a small Hub whose Queue forwards "Typeset" to MathJax 3.
 */
(function () {
  "use strict";

  var here = document.currentScript && document.currentScript.src;
  if (here && typeof window.require === "undefined") {
    var folder = new URL("html-manager/", here).href;
    var paths = {};
    ["base", "controls", "base7", "controls7", "html-manager", "html-manager/dist/libembed-amd"].forEach(
      function (name) {
        paths["@jupyter-widgets/" + name] = folder + name.split("/").pop();
      }
    );
    paths.anywidget = new URL("anywidget/index", here).href;
    window.require = { paths: paths };
  }
  window.__attentionBookStaticPage = true;
  // Where widgets.js finds onnxruntime-web (chapters 4, 6 and 7 run their models in the page):
  // one classic script that tools/site/build_book.py writes next to this file.
  if (here) {
    window.__attentionBookOnnxRuntimeScript = new URL("onnxruntime-web/ort-wasm-inline.js", here).href;
    // Chapter 7's pretrained model, too large to save with its page: one script per model in this folder
    // (tools/site/build_book.py, PAGE_MODELS), added by widgets.js on the first sentence a reader types.
    window.__attentionBookPageModelFolder = new URL("page-models/", here).href;
  }

  function typeset(element) {
    var mathjax = window.MathJax;
    if (!mathjax || !mathjax.startup || !mathjax.startup.promise) {
      return; // MathJax has not loaded yet: its own first pass will typeset the page.
    }
    mathjax.startup.promise
      .then(function () {
        return mathjax.typesetPromise(element ? [element] : undefined);
      })
      .catch(function (error) {
        console.warn("MathJax could not typeset a widget label:", error);
      });
  }

  var hub = {
    Queue: function () {
      for (var i = 0; i < arguments.length; i += 1) {
        var command = arguments[i];
        if (Array.isArray(command) && command[0] === "Typeset") {
          typeset(command[2]);
        } else if (typeof command === "function") {
          command();
        }
      }
    },
  };

  function attachHub(value) {
    if (value && typeof value === "object" && !value.Hub) {
      try {
        value.Hub = hub;
      } catch (error) {
        /* a frozen object: leave it alone */
      }
    }
    return value;
  }

  var current = attachHub(window.MathJax);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    enumerable: true,
    get: function () {
      return current;
    },
    set: function (value) {
      current = attachHub(value);
    },
  });
})();
