"""The Snakemake HTML report of the tiny sweep: every figure and table in it, each with its caption,
and the figures rendered by a real browser (Debian's headless chromium).

The report is a React app with every result embedded as a data URI. The browser tests load a copy
with tests/report/drive_report.js added, which clicks through the report's own menus and buttons
(headless chromium takes no clicks and the app has no URL routing) and writes what it saw into the
DOM; `chromium --dump-dom` and `--screenshot` then show the state after it ran.
"""

import base64
import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import snakemake
from scalesweep.contract.layout import FIGURE_FORMATS
from scalesweep.analysis.tables import TABLES
from scalesweep.report.figures import FIGURE_NAMES
from scalesweep.tidy.table import group_keys
from test_figures import svg_text

HERE = Path(__file__).resolve().parent
ENSURE_CHROMIUM = HERE / "report" / "ensure-chromium.sh"
DRIVER = HERE / "report" / "drive_report.js"
CHROMIUM = "/usr/bin/chromium"
NOT_ROOT = 3  # ensure-chromium.sh: chromium missing and installing it needs root
CAPTIONS = HERE.parent / "workflow" / "report"
SHOWN_LAST = "throughput_by_model"  # the figure the driver leaves on screen for the screenshot
SCREEN = (1600, 1000)

# What each figure's caption must open with: the per-figure part of figures.rst was chosen.
FIGURE_TOPICS = {
    "time": "Steady-state epoch time",
    "throughput": "Global throughput",
    "speedup": "Speedup",
    "tts_speedup": "Time-to-solution speedup",
    "efficiency": "Parallel efficiency",
    "marginal_gain": "Marginal gain per doubling",
    "karp_flatt": "Karp-Flatt experimental serial fraction",
    "throughput_efficiency": "Throughput and efficiency together",
    "step_breakdown": "Where an image's GPU time goes",
    "comm_compute_ratio": "Communication / compute ratio",
    "bus_bandwidth": "All-reduce bus bandwidth",
    "energy_per_image": "GPU energy per image",
}


# ----------------------------------------------------------------------------- helpers

def figure_stem(name):
    """The metric of a figure name: tts_speedup_all -> tts_speedup."""
    return re.sub(r"_(by_model|all)$", "", name)


def figure_topic(name):
    return FIGURE_TOPICS[figure_stem(name)]


def report_variable(page, name):
    """The JSON the report assigns to `var <name> = ...;` in its <script id="<name>">."""
    match = re.search(rf'<script id="{name}">\s*var {name} = (.*?);\s*</script>', page, re.S)
    assert match, f"report.html: no <script id=\"{name}\"> with var {name}"
    return json.loads(match.group(1))


def decode_data_uri(uri):
    head, _, data = uri.partition(",")
    assert head.endswith(";base64"), f"not a base64 data URI: {head}"
    return base64.b64decode(data)


def text_of(caption_html):
    """Plain text of a caption's HTML, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", caption_html)).split())


def undocumented_columns(columns, caption_html, keys):
    """Columns a table caption does not name. `metric:value` columns count as `metric`, numbered
    ones (pred_gpus_1) as `pred_gpus_k`, and a `_min`/`_max`/`_range` column is named by its own
    name or its measurement's; group keys (the sweep's configuration axes) need no caption."""
    text = text_of(caption_html)
    missing = []
    for column in columns:
        name = re.sub(r"_\d+$", "_k", column.split(":")[0])
        if name in keys:
            continue
        forms = {name, re.sub(r"_(min|max|range)$", "", name)}
        if not any(re.search(rf"(?<!\w){re.escape(form)}(?!\w)", text) for form in forms):
            missing.append(column)
    return missing


def without_spaces(text):
    return re.sub(r"\s+", "", text)


class ElementText(HTMLParser):
    """Text of the element with a given id (script contents are not parsed as tags)."""

    def __init__(self, element_id):
        super().__init__()
        self.element_id, self.depth, self.parts = element_id, 0, []

    def handle_starttag(self, tag, attrs):
        if self.depth:
            self.depth += 1
        elif dict(attrs).get("id") == self.element_id:
            self.depth = 1

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.parts.append(data)


def element_text(page, element_id):
    parser = ElementText(element_id)
    parser.feed(page)
    return "".join(parser.parts)


def chromium(url, profile, *args, timeout=180):
    """Headless chromium on a closed network: no sandbox (root), no GPU, no background fetches."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=30000",
         "--hide-scrollbars", *args, url],
        capture_output=True, text=True, timeout=timeout,
    )


def with_driver(page, show_figure):
    """The report page with the driver script added at the end of its body."""
    driver = (f'<script id="render-driver" data-show-figure="{show_figure}">'
              f"{DRIVER.read_text()}</script>")
    end = page.rindex("</body>")
    return page[:end] + driver + page[end:]


def rgb_pixels(image):
    return np.asarray(image.convert("RGB"), dtype=np.int32).reshape(-1, 3)


def packed(pixels):
    """One int per RGB pixel: np.unique on rows is far slower than on ints."""
    return (pixels[:, 0] << 16) | (pixels[:, 1] << 8) | pixels[:, 2]


def near_colour_count(image, colour, tolerance=40):
    """Pixels of an image within `tolerance` (max over channels) of the RGB `colour`."""
    return int((np.abs(rgb_pixels(image) - np.array(colour)).max(axis=1) <= tolerance).sum())


def line_colours(image, n=2):
    """The `n` most frequent strongly saturated colours of a figure: its data lines and bars."""
    pixels = rgb_pixels(image)
    saturated = packed(pixels[pixels.max(axis=1) - pixels.min(axis=1) > 80])
    colours, counts = np.unique(saturated, return_counts=True)
    return [(int(c) >> 16, (int(c) >> 8) & 255, int(c) & 255)
            for c in colours[np.argsort(counts)[::-1][:n]]]


# ----------------------------------------------------------------------------- no sweep needed

def test_every_table_and_the_figures_have_a_caption_file():
    # The rules name these files; a missing one stops `snakemake --report` after the whole sweep.
    for name in (*TABLES, "figures", "workflow"):
        assert (CAPTIONS / f"{name}.rst").read_text().strip(), name


def test_a_caption_names_columns_literally_or_by_their_pattern():
    caption = ("<p><tt>time_s</tt>: epoch time; <tt>pred_gpus_k</tt> (k = 1, 2); "
               "<tt>speedup:&lt;model&gt;</tt></p>")
    columns = ["framework", "time_s", "time_s_min", "time_s_range", "pred_gpus_1", "pred_gpus_2",
               "speedup:cnn_small", "framework:cnn_small", "efficiency_pct", "speedup_k"]
    assert undocumented_columns(columns, caption, keys={"framework"}) == [
        "efficiency_pct", "speedup_k"]


def test_figure_topics_cover_every_figure():
    assert {figure_stem(name) for name in FIGURE_NAMES} == set(FIGURE_TOPICS)


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def report(tiny_sweep, tmp_path_factory):
    # A copy: the sweep is shared with tests that list exactly the files a sweep writes.
    workdir = tmp_path_factory.mktemp("reported") / "sweep"
    shutil.copytree(tiny_sweep, workdir, symlinks=True)
    result = snakemake(workdir, "--report", "results/report.html")
    assert result.returncode == 0, result.stderr[-4000:]
    page = (workdir / "results/report.html").read_text()
    return {"page": page, "results": report_variable(page, "results"),
            "categories": report_variable(page, "categories"), "workdir": workdir}


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, installed with apt when missing and we are root; else skip."""
    result = subprocess.run(["sh", str(ENSURE_CHROMIUM)], capture_output=True, text=True,
                            timeout=900)
    if result.returncode == NOT_ROOT:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, (f"{ENSURE_CHROMIUM.name} failed:\n"
                                    f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return CHROMIUM


@pytest.fixture(scope="module")
def driven(report, browser, tmp_path_factory):
    """The driver's record of the report as the browser showed it, and a screenshot of its end
    state (SHOWN_LAST on screen, with its caption)."""
    folder = tmp_path_factory.mktemp("report")
    page = folder / "driven.html"
    page.write_text(with_driver(report["page"], SHOWN_LAST))
    dom = chromium(page.as_uri(), folder / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    record = element_text(dom.stdout, "render-check")
    assert record, f"the driver left no record: chromium said {dom.stderr[-3000:]}"
    screenshot = folder / "screenshot.png"
    shot = chromium(page.as_uri(), folder / "profile-shot",
                    f"--window-size={SCREEN[0]},{SCREEN[1]}", f"--screenshot={screenshot}")
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-3000:]
    return {"record": json.loads(record), "screenshot": screenshot}


# ----------------------------------------------------------------------------- the report file

@pytest.mark.slow
def test_report_embeds_every_figure_and_table_from_the_results(report):
    results, workdir = report["results"], report["workdir"]
    expected = {f"results/figures/{name}.{suffix}" for name in FIGURE_NAMES for suffix in FIGURE_FORMATS}
    expected |= {f"results/tables/{name}.csv" for name in TABLES}
    expected |= {"results/tidy/runs.csv", "results/tidy/epochs.csv", "results/findings.md",
                 "results/throughput_history.png"}
    run_logs = {str(path.relative_to(workdir)) for path in (workdir / "results/runs").rglob("train.log")}
    assert len(run_logs) == 4
    assert set(results) == expected | run_logs
    for path in run_logs:  # results/runs/<framework>/model~<m>/dataset~<d>/gpus~<n>/<settings>/train.log
        framework, model, dataset, gpus = path.split("/")[2:6]
        assert {key: results[path]["labels"][key] for key in ("framework", "model", "dataset", "gpus")} == {
            "framework": framework, "model": model.split("~")[1], "dataset": dataset.split("~")[1],
            "gpus": gpus.split("~")[1]}
    for path, entry in results.items():
        assert decode_data_uri(entry["data_uri"]) == (workdir / path).read_bytes(), path
    categories = report["categories"]
    figures = {path for paths in categories["Figures"].values() for path in paths}
    tables = {path for paths in categories["Tables"].values() for path in paths}
    assert figures == {p for p in expected if p.startswith("results/figures/")}
    assert tables == {p for p in expected if p.endswith(".csv")}
    for category, paths in (("Findings", {"results/findings.md"}),
                            ("History", {"results/throughput_history.png"}), ("Run logs", run_logs)):
        assert {found for listed in categories[category].values() for found in listed} == paths


@pytest.mark.slow
def test_every_figure_has_its_own_caption(report):
    for name in FIGURE_NAMES:
        entry = report["results"][f"results/figures/{name}.png"]
        assert entry["labels"] == {"figure": name, "format": "png"}
        caption = text_of(entry["caption"])
        # docutils puts rst errors into the HTML; an unrendered Jinja tag would show as {{ / {%
        assert "System Message" not in caption and "{" not in caption, (name, caption)
        assert caption.startswith(figure_topic(name)), (name, caption)
        assert "GPU" in caption


@pytest.mark.slow
def test_every_figure_is_also_in_the_report_as_svg_with_the_png_caption(report):
    """Snakemake's report offers a label with two values, each on half the entries, as a toggle:
    one row per figure, PNG or SVG at a click."""
    for name in FIGURE_NAMES:
        path = f"results/figures/{name}.svg"
        entry, png = report["results"][path], report["results"][f"results/figures/{name}.png"]
        assert entry["labels"] == {"figure": name, "format": "svg"}
        assert entry["mime_type"] == "image/svg+xml" and entry["data_uri"].startswith("data:image/svg+xml")
        assert svg_text(report["workdir"] / path), name  # XML, its text kept as text
        assert entry["caption"] == png["caption"]


@pytest.mark.slow
def test_every_table_caption_names_every_column(report):
    keys = group_keys(pd.read_csv(report["workdir"] / "results/tidy/runs.csv"))
    for name in TABLES:
        entry = report["results"][f"results/tables/{name}.csv"]
        assert entry["labels"] == {"table": name}
        assert "System Message" not in entry["caption"] and "{" not in text_of(entry["caption"])
        columns = pd.read_csv(report["workdir"] / f"results/tables/{name}.csv").columns
        missing = undocumented_columns(columns, entry["caption"], keys)
        assert not missing, f"{CAPTIONS / (name + '.rst')} does not describe columns {missing}"
    epochs = report["results"]["results/tidy/epochs.csv"]
    columns = pd.read_csv(report["workdir"] / "results/tidy/epochs.csv").columns
    assert not undocumented_columns(columns, epochs["caption"], keys)


# ----------------------------------------------------------------------------- in the browser

@pytest.mark.slow
def test_browser_shows_every_figure_as_png_and_svg_at_its_size_with_its_caption(report, driven):
    record = driven["record"]
    assert record["error"] is None, record["error"]
    assert set(record["figures"]) == set(record["svgFigures"]) == set(FIGURE_NAMES)
    for name, seen in record["figures"].items():
        svg = record["svgFigures"][name]  # the same row, its format switch at svg
        with Image.open(report["workdir"] / f"results/figures/{name}.png") as png:
            assert (seen["image"]["width"], seen["image"]["height"]) == png.size, name
            # matplotlib sizes the SVG in points, 72 per inch, which a browser shows at 96 CSS
            # pixels per inch; the PNG has 120 pixels per inch.
            assert svg["width"] == pytest.approx(png.size[0] * 96 / 120, rel=0.05), name
        assert seen["image"]["src"].startswith("data:image/png;")
        assert f"filename={name}.png;" in seen["image"]["src"]
        assert svg["src"].startswith("data:image/svg+xml;") and f"filename={name}.svg;" in svg["src"]
        assert " ".join(seen["caption"].split()).startswith(figure_topic(name)), name


@pytest.mark.slow
def test_browser_offers_every_table_for_download_with_its_caption(report, driven):
    record = driven["record"]
    assert record["error"] is None, record["error"]
    assert set(record["tables"]) == {*TABLES, "runs", "epochs"}
    for name, seen in record["tables"].items():
        path = f"results/tidy/{name}.csv" if name in ("runs", "epochs") else f"results/tables/{name}.csv"
        assert seen["download"] == f"{name}.csv"
        assert decode_data_uri(seen["href"]) == (report["workdir"] / path).read_bytes()
        embedded = report["results"][path]["caption"]
        # The browser lays text out (spaces around inline code, line breaks): compare the text
        # without whitespace.
        assert seen["caption"], name
        assert without_spaces(seen["caption"]) == without_spaces(text_of(embedded)), name


@pytest.mark.slow
def test_screenshot_shows_the_figure_drawn(report, driven):
    with Image.open(driven["screenshot"]) as shot, \
            Image.open(report["workdir"] / f"results/figures/{SHOWN_LAST}.png") as figure:
        assert shot.size == SCREEN
        # The navbar and page have no saturated colours of the plot: its lines only are drawn
        # in them, so finding them proves the PNG was decoded and painted, not just loaded.
        colours = line_colours(figure)
        assert len(colours) == 2, f"{SHOWN_LAST}.png has no coloured lines to look for"
        for colour in colours:
            assert near_colour_count(shot, colour) >= 150, f"no RGB {colour} of the plot on screen"
        distinct = len(np.unique(packed(rgb_pixels(shot))))
        assert distinct > 200, f"screenshot looks blank: {distinct} colours"



FINDING = re.compile(r"(\w+), (\w+), ([\w-]+)(?:, \S+)*\s+Scaling: measured up to (\d+) GPUs?, "
                     r"speedup ([\d.]+)×(?: \(95 % [\d.]+–[\d.]+\))? at ([\d.]+) % efficiency")
NO_SPEEDUP = re.compile(r"(\w+), (\w+), ([\w-]+)(?:, \S+)*\s+Scaling: no two GPU counts with a usable, unflagged time")


def front_page_html(page):
    """The report's front page: the rendered workflow description (workflow/report/workflow.rst),
    a JSON string in <script id="workflow-desc">."""
    match = re.search(r'<script id="workflow-desc">\s*var workflow_desc = (".*?");\s*</script>',
                      page, re.S)
    assert match, "report.html: no workflow description"
    return json.loads(match.group(1))


def assert_findings_match(text, workdir):
    """The findings come before the description of the metrics, one per group of scaling.csv:
    its largest GPU count above the baseline that is not flagged, whose speedup and efficiency
    are the table's as printed, or, where every such count is flagged (a busy node can make the
    tiny sweep's 2-GPU point superlinear), the line that says there is no speedup to report."""
    assert text.index("Findings") < text.index("scalesweep measures how")
    scaling = pd.read_csv(workdir / "results/tables/scaling.csv")
    keys = ["framework", "model", "dataset"]
    headed = scaling[scaling["flags"].isna() & (scaling["gpus"] > scaling["baseline_gpus"])]
    found = FINDING.findall(text)
    assert scaling.groupby(keys).ngroups >= 2
    assert len(found) == headed.groupby(keys).ngroups
    assert len(found) + len(NO_SPEEDUP.findall(text)) == scaling.groupby(keys).ngroups
    for framework, model, dataset, gpus, speedup, efficiency in found:
        group = headed[(headed["framework"] == framework) & (headed["model"] == model)
                       & (headed["dataset"] == dataset)]
        row = group[group["gpus"] == int(gpus)]
        assert int(gpus) == group["gpus"].max() and len(row) == 1, (model, gpus)
        assert float(speedup) == round(row["speedup"].iloc[0], 2), model
        assert float(efficiency) == round(row["efficiency_pct"].iloc[0], 1), model


@pytest.mark.slow
def test_front_page_opens_with_the_findings_of_scaling_csv(report):
    front = text_of(front_page_html(report["page"]))
    assert_findings_match(front, report["workdir"])
    findings_md = (report["workdir"] / "results/findings.md").read_text()
    assert findings_md.startswith("**Findings") and findings_md.count("- Why: ") == 2


@pytest.mark.slow
def test_browser_front_page_shows_the_findings(report, driven, tmp_path_factory):
    """What the browser shows first is the findings, numbers as in scaling.csv; a screenshot of
    that page has text on it."""
    record = driven["record"]
    assert record["error"] is None, record["error"]
    assert_findings_match(" ".join(record["front"].split()), report["workdir"])
    folder = tmp_path_factory.mktemp("front")
    page = folder / "report.html"
    page.write_text(report["page"])
    screenshot = folder / "front.png"
    shot = chromium(page.as_uri(), folder / "profile", f"--window-size={SCREEN[0]},{SCREEN[1]}",
                    f"--screenshot={screenshot}")
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-3000:]
    with Image.open(screenshot) as image:
        assert image.size == SCREEN
        dark = near_colour_count(image, (0, 0, 0), tolerance=90)
        assert dark > 2_000, f"front page looks empty: {dark} dark (text) pixels"


FIRST_SCREEN = (1400, 900)  # the window issue 29 found the front page's title above


@pytest.mark.slow
def test_the_first_screen_shows_the_findings_title(report, browser, tmp_path_factory):
    """Snakemake's template centres its front page in a window-high box, so a page taller than
    the window began above it, out of scroll's reach; workflow.rst's stylesheet starts it at the
    top. The driver reads where the title is laid out before any scroll or click; a screenshot of
    the page as it opens shows the title painted there."""
    folder = tmp_path_factory.mktemp("first-screen")
    size = f"--window-size={FIRST_SCREEN[0]},{FIRST_SCREEN[1]}"
    driven_page = folder / "driven.html"
    driven_page.write_text(with_driver(report["page"], SHOWN_LAST))
    dom = chromium(driven_page.as_uri(), folder / "profile-dom", size, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    seen = json.loads(element_text(dom.stdout, "render-check"))["firstScreen"]
    assert seen["title"] == "Findings: how far each configuration scales, where to stop, and why"
    box, window = seen["box"], seen["window"]
    assert window["width"] == FIRST_SCREEN[0]
    # On the first screen, at its top: not merely somewhere a scroll could reach.
    assert 0 <= box["top"] < 120 and box["bottom"] <= window["height"], (box, window)
    page = folder / "report.html"
    page.write_text(report["page"])
    screenshot = folder / "first-screen.png"
    shot = chromium(page.as_uri(), folder / "profile-shot", size, f"--screenshot={screenshot}")
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-3000:]
    with Image.open(screenshot) as image:
        title = image.crop((int(box["left"]), int(box["top"]), int(box["right"]), int(box["bottom"])))
        assert near_colour_count(title, (0, 0, 0), tolerance=90) > 300, "no text painted where the title is"
