// Reads the Snakemake report the way a reader does, through its own menus and buttons, and leaves
// what it saw as JSON in <pre id="render-check"> for `chromium --dump-dom` (tests/test_report.py).
// Injected into a copy of the report: the report app has no URL routing, and headless chromium
// takes no clicks. It ends on the figure named in data-show-figure with its caption, so that a
// screenshot shows both.
(function () {
    "use strict";
    const POLL_MS = 20;
    const MAX_POLLS = 250;

    function wait() {
        return new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }

    async function until(find, what) {
        for (let i = 0; i < MAX_POLLS; i++) {
            const found = find();
            if (found) {
                return found;
            }
            await wait();
        }
        throw new Error("gave up waiting for " + what);
    }

    function navLinks() {
        return Array.from(document.querySelectorAll("#app nav a"));
    }

    function linkWithText(text) {
        return navLinks().find((a) => a.textContent.trim() === text);
    }

    function resultRows() {
        // The listing of a category, below its toggles if it has any (a div around both); a
        // result's info view has a table of its own, inside a list.
        return Array.from(document.querySelectorAll(
            "#app nav div.p-3 > table > tbody > tr, #app nav div.p-3 > div > table > tbody > tr"));
    }

    async function click(element) {
        element.click();
        await wait();  // React renders after the click handler returns: never read the old DOM
    }

    function shownImage() {
        // The content pane is the app's only top-level "grow" element; the navbar holds the logo.
        return document.querySelector("#app > div > div.grow img");
    }

    function captionText() {
        const caption = document.querySelector("#app nav li.prose");
        return caption ? caption.innerText.trim() : "";
    }

    async function openCategory(category) {
        const home = document.querySelector("#app nav ol a");
        if (home && !linkWithText(category)) {
            await click(home);  // the breadcrumbs' first entry leads back to the menu
        }
        await click(await until(() => linkWithText(category), "menu entry " + category));
        return until(() => (resultRows().length ? resultRows() : null), "results of " + category);
    }

    function rowNamed(rows, name) {
        const row = rows.find((r) => r.cells[0].textContent.trim() === name);
        if (!row) {
            throw new Error("no result named " + name + " in the listing");
        }
        return row;
    }

    function rowButtons(row) {
        const buttons = row.querySelectorAll("td:last-child a");
        return { view: buttons[0], info: buttons[1] };
    }

    function dataUriHead(uri) {
        // e.g. data:image/png;charset=utf8;filename=x.png;base64
        return uri.slice(0, uri.indexOf(","));
    }

    async function showImage(row) {
        // React reuses one <img> and swaps its source; a source names its file, so it changes.
        const before = shownImage() ? shownImage().src : "";
        await click(rowButtons(row).view);
        const img = await until(() => {
            const now = shownImage();
            return now && now.src !== before && now.complete ? now : null;
        }, "the image of " + row.cells[0].textContent);
        return { width: img.naturalWidth, height: img.naturalHeight, src: dataUriHead(img.src) };
    }

    async function readCaption(category, name) {
        const row = rowNamed(await openCategory(category), name);
        await click(rowButtons(row).info);
        return until(captionText, "the caption of " + name);
    }

    async function readCategory(category, isFigure) {
        const seen = {};
        const names = (await openCategory(category)).map((r) => r.cells[0].textContent.trim());
        for (const name of names) {
            const row = rowNamed(await openCategory(category), name);
            const entry = {};
            if (isFigure) {
                entry.image = await showImage(row);
            } else {
                const view = rowButtons(row).view;
                entry.download = view.getAttribute("download");
                entry.href = view.getAttribute("href");
            }
            entry.caption = await readCaption(category, name);
            seen[name] = entry;
        }
        return seen;
    }

    async function readFiguresAs(format) {
        // Each figure shown in the other format: the listing's toggle (a label with two values,
        // each on half the entries) set to it after the category opens, which resets it.
        const seen = {};
        const names = (await openCategory("Figures")).map((r) => r.cells[0].textContent.trim());
        for (const name of names) {
            await openCategory("Figures");
            await click(await until(() => document.getElementById("toggle-format-" + format),
                                    "the format toggle " + format));
            seen[name] = await showImage(rowNamed(resultRows(), name));
        }
        return seen;
    }

    function firstScreen() {
        // Where the findings' title is laid out before any scroll or click, and the window's size.
        const title = Array.from(document.querySelectorAll("#app strong"))
            .find((element) => element.textContent.trim().startsWith("Findings"));
        const box = title ? title.getBoundingClientRect() : null;
        return {
            title: title ? title.textContent.trim() : null,
            box: box ? { top: box.top, bottom: box.bottom, left: box.left, right: box.right } : null,
            window: { width: window.innerWidth, height: window.innerHeight },
        };
    }

    async function drive(out, showFigure) {
        // The front page as the reader first sees it: the workflow description, findings first.
        const app = await until(() => {
            const found = document.querySelector("#app");
            return found && found.innerText.includes("Findings") ? found : null;
        }, "the front page with its findings");
        out.front = app.innerText;
        out.firstScreen = firstScreen();
        out.figures = await readCategory("Figures", true);
        out.svgFigures = await readFiguresAs("svg");
        out.tables = await readCategory("Tables", false);
        const row = rowNamed(await openCategory("Figures"), showFigure);
        await showImage(row);
        await click(rowButtons(row).info);
    }

    function report(out) {
        const pre = document.createElement("pre");
        pre.id = "render-check";
        pre.style.display = "none";
        pre.textContent = JSON.stringify(out);
        document.body.appendChild(pre);
    }

    window.addEventListener("load", function () {
        const out = { front: "", figures: {}, svgFigures: {}, tables: {}, error: null };
        drive(out, document.querySelector("#render-driver").dataset.showFigure)
            .catch((error) => { out.error = String(error); })
            .finally(() => report(out));
    });
})();
