"""The README is a first screen and docs/ has a contents list that reaches every page: what a
newcomer reads first stays short, and nothing written lies where no list points."""

import re

from conftest import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def links(page):
    """The relative targets of a Markdown page's links, as paths."""
    return [(page.parent / target).resolve() for target in LINK.findall(page.read_text())
            if "://" not in target]


def test_the_readme_is_a_first_screen():
    assert len((REPO / "README.md").read_text().splitlines()) <= 150


def test_the_contents_list_reaches_every_page_of_docs_and_every_link_resolves():
    contents = REPO / "docs" / "README.md"
    listed = set(links(contents))
    pages = {page.resolve() for page in (REPO / "docs").glob("*.md") if page != contents}
    assert pages - listed == set()
    assert [path for path in listed if not path.exists()] == []
    assert (REPO / "config" / "README.md").resolve() in listed


def test_every_link_of_the_readme_and_docs_resolves():
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "config" / "README.md"]
    broken = [f"{page.relative_to(REPO)} -> {path}" for page in pages for path in links(page) if not path.exists()]
    assert broken == []


def test_every_make_target_the_readme_names_exists():
    makefile = (REPO / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY: (.*)$", makefile, flags=re.M).group(1).split())
    named = set(re.findall(r"`make ([a-z-]+)", (REPO / "README.md").read_text()))
    named |= set(re.findall(r"^make ([a-z-]+)", (REPO / "README.md").read_text(), flags=re.M))
    assert {"sweep", "test", "bundle"} <= named and named <= phony


def test_user_docs_name_no_tracker_issue():
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "benchmarks" / "README.md"]
    found = [f"{page.relative_to(REPO)}: {match}" for page in pages
             for match in re.findall(r"\b[Ii]ssues? \d+", page.read_text())]
    assert found == []
