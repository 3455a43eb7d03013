// The Shoal Console's only script (served from /ui/static/, allowed by the page's CSP; no inline
// script anywhere). Everything works without it: it only asks before destructive forms are sent
// and sends a filter form when one of its selects changes.
"use strict";
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});
document.addEventListener("change", function (event) {
  var el = event.target;
  if (el.hasAttribute && el.hasAttribute("data-autosubmit") && el.form) {
    el.form.requestSubmit ? el.form.requestSubmit() : el.form.submit();
  }
});
