// Every figure a chapter's code draws is shrunk to the page column; a click opens the
// picture itself, at its full size, in a new tab. (Copied to vendor/ by tools/site/build_book.py,
// loaded by tools/site/sphinx_offline.py.)
document.addEventListener("DOMContentLoaded", () => {
  for (const image of document.querySelectorAll(".cell_output img")) {
    if (image.closest("a")) continue;
    const link = document.createElement("a");
    link.href = image.getAttribute("src");
    link.target = "_blank";
    link.rel = "noopener";
    link.className = "figure-full-size";
    link.title = "Open the figure at full size";
    image.replaceWith(link);
    link.appendChild(image);
  }
});
