// Where the report's front page puts the findings' title in the window, as the reader first sees
// it (no scrolling, no clicks): its box and the window's size, written as JSON into
// a hidden pre element (id first-screen) for `chromium --dump-dom` (tests/test_report.py).
(function () {
    "use strict";

    function findingsTitle() {
        return Array.from(document.querySelectorAll("#app strong"))
            .find((element) => element.textContent.trim().startsWith("Findings"));
    }

    function report(out) {
        const pre = document.createElement("pre");
        pre.id = "first-screen";
        pre.style.display = "none";
        pre.textContent = JSON.stringify(out);
        document.body.appendChild(pre);
    }

    window.addEventListener("load", function () {
        let polls = 0;
        const timer = setInterval(function () {
            const title = findingsTitle();
            if (!title && ++polls < 250) {
                return;
            }
            clearInterval(timer);
            const box = title ? title.getBoundingClientRect() : null;
            report({
                title: title ? title.textContent.trim() : null,
                box: box ? { top: box.top, bottom: box.bottom, left: box.left, right: box.right } : null,
                window: { width: window.innerWidth, height: window.innerHeight },
            });
        }, 20);
    });
})();
