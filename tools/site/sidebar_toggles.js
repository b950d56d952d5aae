// Make every sidebar toggle of the site work (issue: phone navigation did nothing).
//
// pydata-sphinx-theme 0.17 renders a primary-sidebar toggle of its own in the header, and
// sphinx-book-theme renders another in the article header; both carry the class
// `primary-toggle` (likewise `secondary-toggle` for the page contents). Each theme binds
// its click handler with document.querySelector, that is to the *first* such button only,
// and on a phone that first one is hidden: the visible one does nothing. (Upstream:
// pydata-sphinx-theme #2451, sphinx-book-theme #988 and #917.)
//
// The fix: every other button with the same class forwards its click to the first one,
// so whichever button the reader sees runs the themes' own handlers: on a narrow screen
// the drawer (a <dialog>) opens; on a wide one sphinx-book-theme collapses the sidebar.
(function () {
  function forwardClicks(selector) {
    var buttons = document.querySelectorAll(selector);
    if (buttons.length < 2) {
      return;
    }
    var bound = buttons[0];
    for (var i = 1; i < buttons.length; i++) {
      buttons[i].addEventListener("click", function (event) {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
  function setup() {
    forwardClicks(".primary-toggle");
    forwardClicks(".secondary-toggle");
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setup);
  } else {
    setup();
  }
})();
