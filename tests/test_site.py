"""The documentation site builds, its links hold, and it works in a real browser.

The site is built once for this module with ``mkdocs build --strict`` (as the README's test
command builds it) into a temporary directory. Every internal link and anchor of every
built page is checked; then the site is served on 127.0.0.1 and four pages are opened in
headless Chromium (the system's ``chromium``, driven by playwright; nothing is
downloaded): their title and navigation render, the study page's figure loads, and the
search finds ``set_epoch``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Seconds the build may take (it imports every module the API reference documents).
BUILD_TIMEOUT = 300
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("site") / "site"
    environment = dict(os.environ, PYTHONPATH=str(ROOT), NO_MKDOCS_2_WARNING="1")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(directory)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert built.returncode == 0, built.stderr[-5000:]
    return directory


class Page(HTMLParser):
    """The ids a page defines and the URLs it refers to."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.references: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                self.ids.add(str(values[name]))
        for name in ("href", "src"):
            if values.get(name) and tag in ("a", "link", "img", "script", "source"):
                self.references.append(str(values[name]))

    @staticmethod
    def of(path: Path) -> Page:
        page = Page()
        page.feed(path.read_text())
        return page


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """The fragments a link to ``path`` may name (none for a file that is not a page)."""
    return frozenset(Page.of(path).ids if path.suffix == ".html" else ())


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def broken_links(site: Path) -> tuple[int, list[str]]:
    """How many internal links and sources the pages under ``site`` hold, and which of
    them name a missing file or a missing anchor."""
    checked = 0
    broken = []
    site = site.resolve()
    for path in pages(site):
        for reference in Page.of(path).references:
            url = urlsplit(reference)
            if url.scheme or url.netloc:  # external: not this site's to check
                continue
            if not url.path:
                target = path
            elif url.path.startswith("/"):  # the 404 page's links, from the site's root
                target = (site / unquote(url.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)} -> {reference}"
            if not target.is_relative_to(site) or not target.exists():
                broken.append(where)
            elif url.fragment and unquote(url.fragment) not in anchors(target):
                broken.append(f"{where} (no such anchor)")
            checked += 1
    return checked, broken


def test_every_internal_link_and_anchor_resolves(site: Path) -> None:
    checked, broken = broken_links(site)
    assert broken == []
    assert checked > 1000  # the navigation alone links every page from every page


def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text('<h2 id="here">Here</h2>')
    (tmp_path / "index.html").write_text(
        '<a href="guide/#here">ok</a> <a href="guide/#gone">anchor</a> '
        '<a href="missing/">page</a> <img src="figure.png"> <a href="https://x.org/#y">out</a>'
    )
    checked, broken = broken_links(tmp_path)
    assert checked == 4
    assert broken == [
        "index.html -> guide/#gone (no such anchor)",
        "index.html -> missing/",
        "index.html -> figure.png",
    ]


def test_the_site_has_every_page_and_says_how_to_run_it(site: Path) -> None:
    names = {str(path.relative_to(site)) for path in pages(site)}
    for expected in (
        "index.html",
        "getting-started/index.html",
        "guides/torchrun-resume/index.html",
        "reference/samplers/index.html",
        "reference/testing/index.html",
        "reference/integrations/index.html",
        "study/index.html",
        "study/padding/index.html",
        "changelog/index.html",
    ):
        assert expected in names
    study = {
        name.removesuffix(".md") for name in (ROOT / "reports" / "MANIFEST").read_text().split()
    }
    for report in study - {"README"}:
        if (ROOT / "reports" / f"{report}.md").exists():
            assert f"study/{report}/index.html" in names, report
    for path in pages(site):
        if path.name == "404.html":
            continue
        assert "How to run this:" in path.read_text(), path.relative_to(site)


def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    import samplers
    import samplers.testing

    for page, module in (("samplers", samplers), ("testing", samplers.testing)):
        ids = Page.of(site / "reference" / page / "index.html").ids
        for name in module.__all__:
            assert f"{module.__name__}.{name}" in ids, (page, name)
    ids = Page.of(site / "reference" / "integrations" / "index.html").ids
    for name in ("accelerate.prepare_data_loader", "transformers.ShardedTrainer"):
        assert f"samplers.integrations.{name}" in ids, name
    for name in (
        "lightning.ShardedDataLoader",
        "torchdata.sampler_node",
        "ray.prepare_data_loader",
        "ray.save_state",
        "ray.load_state",
    ):
        assert f"samplers.integrations.{name}" in ids, name


# --- a real browser -------------------------------------------------------------------------


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # a free port
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


#: (screenshot name, path, the document's title, the page's heading; None: the report's)
BROWSED = [
    ("home", "/", "dsampler", "dsampler"),
    ("guide", "/guides/resume/", "Checkpoint and resume - dsampler", "Checkpoint and resume"),
    ("api", "/reference/samplers/", "samplers - dsampler", "samplers"),
    ("report", "/study/padding/", "Padding - dsampler", None),
]


@pytest.mark.timeout(300)
def test_the_site_in_headless_chromium(served: str, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip(f"no chromium at {CHROMIUM} (CI installs Debian's chromium; see .ci/run)")
    from playwright.sync_api import sync_playwright

    report = re.search(r"^# (.+)$", (ROOT / "reports" / "padding.md").read_text(), re.M)
    assert report is not None
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
            headless=True,
            args=CHROMIUM_FLAGS,
            timeout=120_000,
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.on("pageerror", lambda error: errors.append(str(error)))
            for name, path, title, heading in BROWSED:
                page.goto(served + path, wait_until="load")
                assert page.title() == title
                shown = page.locator("article h1").first.inner_text().strip().rstrip("¶")
                assert shown.strip() == (heading or report.group(1).replace("`", ""))
                navigation = page.locator("nav.md-nav--primary")
                assert navigation.first.is_visible()
                for entry in ("Getting started", "Checkpoint and resume", "samplers.testing"):
                    assert navigation.get_by_text(entry, exact=True).count() >= 1, entry
                if name == "report":
                    figure = page.locator("article img").first
                    figure.scroll_into_view_if_needed()
                    page.wait_for_function(
                        "img => img.complete && img.naturalWidth > 0", arg=figure.element_handle()
                    )
                    assert figure.evaluate("img => img.naturalWidth") > 0
                shot = tmp_path / f"{name}.png"
                page.screenshot(path=str(shot))
                print(f"screenshot of {path}: {shot}")
                assert shot.stat().st_size > 10_000

            page.goto(served + "/", wait_until="load")
            page.locator("input.md-search__input").click()
            page.keyboard.type("set_epoch", delay=20)  # as a user types: key by key
            results = page.locator(".md-search-result__item")
            results.first.wait_for(state="visible")
            assert results.count() > 0
            assert "set_epoch" in page.locator(".md-search-result").inner_text()
        finally:
            browser.close()
    assert errors == []
