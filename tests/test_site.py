"""The documentation site builds, its links hold, and it works in a real browser.

The site is built once for this module with ``mkdocs build --strict`` (as the README's test
command builds it) into a temporary directory. Every internal link and anchor of every
built page is checked; the API reference has an entry, with its docstring, for every
public member of every public class (found by introspecting the code); the home page leads
to every guide of the navigation; the sitemap, the 404 page, the source link and the
study's navigation follow ``mkdocs.yml``. Then the site is served on 127.0.0.1 and four
pages are opened in headless Chromium (the system's ``chromium``, driven by playwright;
nothing is downloaded): their title and navigation render, the study page's figure loads,
the search finds ``set_epoch``, and on a 390-pixel screen no copy button covers code.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import itertools
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml

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


def config() -> dict[str, Any]:
    """``mkdocs.yml``."""
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def site_root() -> str:
    """The path the site is served under: ``site_url``'s (``/`` without one)."""
    return urlsplit(config().get("site_url") or "/").path


def broken_links(site: Path, root: str = "/") -> tuple[int, list[str]]:
    """How many internal links and sources the pages under ``site`` hold, and which of
    them name a missing file or a missing anchor; the site is served under ``root``."""
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
                if not url.path.startswith(root):
                    broken.append(f"{path.relative_to(site)} -> {reference} (outside {root})")
                    continue
                target = (site / unquote(url.path).removeprefix(root)).resolve()
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
    checked, broken = broken_links(site, site_root())
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


def test_the_link_check_reads_links_from_the_root_the_site_is_served_under(
    tmp_path: Path,
) -> None:
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text('<h2 id="here">Here</h2>')
    (tmp_path / "404.html").write_text(
        '<a href="/en/latest/guide/#here">ok</a> <a href="/guide/">outside</a> '
        '<a href="/en/latest/gone/">missing</a>'
    )
    checked, broken = broken_links(tmp_path, "/en/latest/")
    assert checked == 2
    assert broken == [
        "404.html -> /guide/ (outside /en/latest/)",
        "404.html -> /en/latest/gone/",
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


# --- the API reference ----------------------------------------------------------------------


def documented_modules() -> list[str]:
    """The modules the API reference documents: ``samplers``, ``samplers.testing`` and every
    module of ``samplers.integrations`` (found without importing them)."""
    import samplers.integrations

    found = pkgutil.iter_modules(samplers.integrations.__path__)
    return ["samplers", "samplers.testing", *(f"samplers.integrations.{m.name}" for m in found)]


def documented(name: str) -> types.ModuleType:
    """The module ``name``; an integration's test is skipped without its framework."""
    if name.startswith("samplers.integrations."):
        return pytest.importorskip(name, reason="its framework is not installed")
    return importlib.import_module(name)


def public_classes(module: types.ModuleType) -> dict[str, type]:
    """The classes ``module`` exports (``__all__``), by name."""
    exported = {name: getattr(module, name) for name in module.__all__}
    return {name: value for name, value in exported.items() if inspect.isclass(value)}


def ours(cls: type, package: str = "samplers") -> bool:
    """Whether ``cls`` is defined in ``package`` (not torch's, nor a framework's)."""
    return cls.__module__.split(".")[0] == package


DOC_COMMENT = re.compile(r"^\s*#: ?(.*)$")


def attribute_docstring(owner: type, name: str) -> str | None:
    """The docstring of the attribute ``name`` in ``owner``'s class body, read from the
    source: the string literal that follows its assignment, or else the ``#:`` comment
    lines right above it (as Sphinx reads them)."""
    source = textwrap.dedent(inspect.getsource(owner))
    lines = source.splitlines()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    statements: list[ast.stmt | None] = [*body.body, None]
    for statement, following in itertools.pairwise(statements):
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        else:
            continue
        if not any(isinstance(target, ast.Name) and target.id == name for target in targets):
            continue
        value = following.value if isinstance(following, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        comments = []
        index = statement.lineno - 2
        while index >= 0 and (match := DOC_COMMENT.match(lines[index])):
            comments.append(match.group(1))
            index -= 1
        return "\n".join(reversed(comments)) or None
    return None


#: What a class body defines that carries its own docstring (else: an attribute).
ROUTINES = (types.FunctionType, classmethod, staticmethod, property, functools.cached_property)


def public_members(cls: type, package: str = "samplers") -> dict[str, str | None]:
    """What a user of ``cls`` calls or reads, by name, with its docstring (``None``: none).

    Its public methods, properties, class attributes and dataclass fields, its own and
    those it inherits from classes of ``package`` (not torch's, nor a framework's, which
    their documentation covers), as introspection finds them; a method's docstring is its
    function's own (not one inherited from an overridden method), an attribute's the
    string under it in the class body.
    """
    names = set(dir(cls))
    if dataclasses.is_dataclass(cls):
        names |= {field.name for field in dataclasses.fields(cls)}
    members: dict[str, str | None] = {}
    for name in sorted(names):
        if name.startswith("_"):
            continue
        owner = next(
            (k for k in cls.__mro__ if name in vars(k) or name in inspect.get_annotations(k)),
            None,
        )
        if owner is None or not ours(owner, package):
            continue
        value = vars(owner).get(name)
        if isinstance(value, ROUTINES):
            doc = getattr(value, "__func__", value).__doc__
        else:
            doc = attribute_docstring(owner, name)
        members[name] = inspect.cleandoc(doc) if doc else None
    return members


ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def words(text: str) -> str:
    """``text``'s words (letters and digits), one space apart: what survives rendering."""
    return " ".join(re.findall(r"[^\W_]+", text))


def summary(docstring: str) -> str:
    """The words of a docstring's first paragraph as the reference shows them (a role
    such as ``:class:`~samplers.X``` shows its target, its last part with ``~``)."""
    first = docstring.split("\n\n", 1)[0]
    shown = ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), first)
    return words(shown)


class Reference(HTMLParser):
    """A page's API entries: each entry's id (the object's path) with the text from its
    heading to the next entry's heading, and the text of the "Bases:" each class shows."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, list[str]] = {}
        self.bases: dict[str, str] = {}
        self._entry: str | None = None
        self._in_bases = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        classes = (values.get("class") or "").split()
        if "doc-heading" in classes and values.get("id"):
            self._entry = str(values["id"])
            self.text[self._entry] = []
        if tag == "p" and "doc-class-bases" in classes and self._entry is not None:
            self._in_bases = True
            self.bases[self._entry] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "p":
            self._in_bases = False
        if tag == "article":
            self._entry = None

    def handle_data(self, data: str) -> None:
        if self._entry is not None:
            self.text[self._entry].append(data)
            if self._in_bases:
                self.bases[self._entry] += data


@functools.cache
def reference(site: Path) -> Reference:
    """The entries of every page of the API reference."""
    parser = Reference()
    for path in sorted((site / "reference").rglob("index.html")):
        parser.feed(path.read_text())
        parser.close()
        parser.reset()
    return parser


def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    ids = set(reference(site).text)
    missing = []
    for name in documented_modules():
        module = documented(name)
        assert module.__all__
        missing += [f"{name}.{e}" for e in module.__all__ if f"{name}.{e}" not in ids]
    assert missing == []
    assert not [entry for entry in ids if any(p.startswith("_") for p in entry.split("."))]


@pytest.mark.parametrize("name", documented_modules())
def test_the_api_reference_has_every_member_with_its_docstring(site: Path, name: str) -> None:
    """Every public method, property, class attribute and field of every class ``name``
    exports has an entry showing its docstring, inherited ones included
    (``DistributedSampler.state_dict`` is ``SamplerCore``'s)."""
    module = documented(name)
    entries = reference(site).text
    problems = []
    members = 0
    for class_name, cls in public_classes(module).items():
        path = f"{name}.{class_name}"
        if cls.__doc__ and summary(inspect.cleandoc(cls.__doc__)) not in words(
            "".join(entries.get(path, []))
        ):
            problems.append(f"{path}: no entry with its docstring")
        for member, docstring in public_members(cls).items():
            members += 1
            entry = f"{path}.{member}"
            if docstring is None:
                problems.append(f"{entry}: no docstring in the code")
            elif entry not in entries:
                problems.append(f"{entry}: no entry")
            elif summary(docstring) not in words("".join(entries[entry])):
                problems.append(f"{entry}: its entry does not show its docstring")
    assert problems == []
    if name == "samplers":  # the members the reference left out before, found here
        for inherited in ("state_dict", "load_state_dict", "set_epoch", "check_consistent"):
            assert inherited in public_members(module.DistributedSampler)
        assert "set_weights" in public_members(module.DistributedMixtureSampler)
    assert members > 0 or not public_classes(module)


def test_the_member_search_finds_inherited_members_and_docstrings() -> None:
    @dataclasses.dataclass
    class Base:
        field: int = 0
        """A field."""
        #: A commented
        #: field.
        commented: int = 1
        bare: int = 2

        def method(self) -> None:
            """A method."""

        def _private(self) -> None:
            """Not public."""

    class Child(Base):
        def method(self) -> None:
            pass

        @property
        def value(self) -> int:
            """A property."""
            return 1

    here = Child.__module__.split(".")[0]
    expected = {
        "bare": None,
        "commented": "A commented\nfield.",
        "field": "A field.",
        "method": None,
        "value": "A property.",
    }
    assert public_members(Child, here) == expected  # Base's method, overridden, is not shown
    assert public_members(Child) == {}  # not a class of samplers
    assert summary("Use :class:`~samplers.X` and :meth:`a.b`.\n\nMore.") == "Use X and a b"


def test_the_api_reference_names_no_undocumented_base(site: Path) -> None:
    """ "Bases:" names a class's bases from outside ``samplers`` and its documented ones,
    not the private scaffolding (``SamplerCore``, ``_Mixture``) whose members each class
    lists itself."""
    classes = {
        f"{name}.{class_name}": cls
        for name in documented_modules()
        for class_name, cls in public_classes(documented(name)).items()
    }
    public = set(classes.values())
    shown = reference(site).bases
    hidden = 0
    for path, cls in classes.items():
        named = words(shown.get(path, "")).split()
        for base in cls.__bases__:
            if base is object:
                continue
            undocumented = ours(base) and base not in public
            hidden += undocumented
            assert (base.__name__ in named) != undocumented, (path, base.__name__, named)
    assert hidden > 0  # the samplers' scaffolding was there to hide


# --- the guides, from the home page -----------------------------------------------------------


class Links(HTMLParser):
    """The links of a page's article (``within``: only those inside that tag), or of its
    ``md-nav__link`` entries (``within="nav"``), as (href, text) in page order."""

    def __init__(self, within: str) -> None:
        super().__init__()
        self.within = within
        self.links: list[tuple[str, str]] = []
        self._depth = 0
        self._link: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == self.within:
            self._depth += 1
        if tag == "a" and values.get("href"):
            nav_link = "md-nav__link" in (values.get("class") or "").split()
            if (self.within == "nav" and nav_link) or (self.within != "nav" and self._depth):
                self._link = [str(values["href"])]

    def handle_endtag(self, tag: str) -> None:
        if tag == self.within:
            self._depth -= 1
        if tag == "a" and self._link is not None:
            href, *text = self._link
            self.links.append((href, " ".join("".join(text).split())))
            self._link = None

    def handle_data(self, data: str) -> None:
        if self._link is not None:
            self._link.append(data)

    @staticmethod
    def of(path: Path, within: str) -> list[tuple[str, str]]:
        parser = Links(within)
        parser.feed(path.read_text())
        return parser.links


def page_of(site: Path, page: Path, href: str) -> str:
    """The page a link on ``page`` leads to, as its Markdown source's path (``guides/x.md``;
    the link itself when it leads elsewhere)."""
    url = urlsplit(href)
    if url.scheme or url.netloc or url.path.startswith("/"):
        return href
    target = (page.parent / unquote(url.path)).resolve().relative_to(site.resolve())
    return "index.md" if not target.parts else f"{target.as_posix()}.md"


def nav_section(title: str) -> list[str]:
    """The pages (Markdown sources) of a section of ``mkdocs.yml``'s navigation."""
    for entry in config()["nav"]:
        if isinstance(entry, dict) and title in entry:
            return [path for item in entry[title] for path in item.values()]
    raise AssertionError(f"no section {title!r} in mkdocs.yml's nav")


def test_the_home_page_leads_to_every_guide_in_one_click(site: Path) -> None:
    home = site.resolve() / "index.html"
    linked = {page_of(site, home, href) for href, _ in Links.of(home, "table")}
    guides = nav_section("Guides")
    assert len(guides) > 10
    assert [guide for guide in guides if guide not in linked] == []


def test_the_resume_guide_names_every_sampler_with_a_state() -> None:
    import samplers

    section = (ROOT / "docs" / "guides" / "resume.md").read_text().split("## The state\n")[1]
    named = set(re.findall(r"`(\w+)`", section.split("\n## ")[0]))
    stateful = [
        name
        for name, cls in public_classes(samplers).items()
        if callable(getattr(cls, "state_dict", None)) and hasattr(cls, "load_state_dict")
    ]
    assert len(stateful) >= 8
    assert [name for name in stateful if name not in named] == []


# --- where the site lives ----------------------------------------------------------------------


def test_the_sitemap_lists_every_page_at_the_site_url(site: Path) -> None:
    url = config()["site_url"]
    listed = set(re.findall(r"<loc>([^<]+)</loc>", (site / "sitemap.xml").read_text()))
    folders = [p.parent.relative_to(site).as_posix() for p in pages(site) if p.name == "index.html"]
    expected = {url if folder == "." else f"{url}{folder}/" for folder in folders}
    assert len(expected) > 40
    assert sorted(expected - listed) == []


def test_the_404_page_links_under_the_site_url_not_the_server_root(site: Path) -> None:
    root = site_root()
    local = [
        reference
        for reference in Page.of(site / "404.html").references
        if not urlsplit(reference).scheme and not urlsplit(reference).netloc
    ]
    assert len(local) > 20  # its styles, its navigation
    assert (
        root != "/" and [reference for reference in local if not reference.startswith(root)] == []
    )
    # and each resolves under the site (as test_every_internal_link_and_anchor_resolves checks)


def test_the_readme_says_where_mkdocs_serve_serves_the_site() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    served = re.search(r"`\.venv/bin/mkdocs serve` serves the documentation at (\S+)", readme)
    assert served is not None
    assert urlsplit(served.group(1)).path == site_root()  # serve mounts it at site_url's path


def test_every_page_links_to_the_source(site: Path) -> None:
    repository = config()["repo_url"]
    assert urlsplit(repository).scheme == "https"
    assert [
        str(path.relative_to(site))
        for path in pages(site)
        if repository not in Page.of(path).references
    ] == []


def test_the_study_is_listed_by_number_under_its_titles(site: Path) -> None:
    listed = (ROOT / "reports" / "MANIFEST").read_text().split()
    findings = []
    for name in listed:
        if name.endswith(".md") and name != "README.md":
            title = re.search(r"^# (.+)$", (ROOT / "reports" / name).read_text(), re.M)
            assert title is not None, name
            text = title.group(1).replace("`", "").strip()
            number = re.match(r"(\d+)\. ", text)
            order = (number is None, int(number.group(1)) if number else 0)
            findings.append((order, text, f"study/{name}"))
    expected = [(text, page) for _, text, page in sorted(findings, key=lambda f: f[0])]
    home = site.resolve() / "index.html"
    study = {page for _, _, page in findings}
    navigation = [
        (text, page_of(site, home, href))
        for href, text in Links.of(home, "nav")
        if page_of(site, home, href) in study
    ]
    assert len(expected) > 20 and all(re.match(r"\d+\. ", text) for text, _ in expected)
    assert navigation == expected


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


#: (screenshot name, path, the document's title, the page's heading; None: the report's
#: title, and that title followed by " - dsampler")
BROWSED = [
    ("home", "/", "dsampler", "dsampler"),
    ("guide", "/guides/resume/", "Checkpoint and resume - dsampler", "Checkpoint and resume"),
    ("api", "/reference/samplers/", "samplers - dsampler", "samplers"),
    ("report", "/study/padding/", None, None),
]
#: A phone's screen (CSS pixels), and a page whose commands are one line each.
PHONE = {"width": 390, "height": 844}
COMMANDS = "/getting-started/"
#: For each code block with a copy button: its lines, and whether the button covers any
#: of its text where the text is visible (inside the code's box, which scrolls).
COVERED = """() => [...document.querySelectorAll("article pre")].flatMap(pre => {
    const code = pre.querySelector(":scope > code");
    const nav = pre.querySelector(":scope > .md-code__nav");
    if (!code || !nav) return [];
    const range = document.createRange();
    range.selectNodeContents(code);
    const text = range.getBoundingClientRect(), box = code.getBoundingClientRect();
    const button = nav.getBoundingClientRect();
    const left = Math.max(text.left, box.left), right = Math.min(text.right, box.right);
    const top = Math.max(text.top, box.top), bottom = Math.min(text.bottom, box.bottom);
    const covered = left < button.right && button.left < right
        && top < button.bottom && button.top < bottom;
    return [{lines: code.innerText.trim().split("\\n").length, covered: covered,
             start: code.innerText.slice(0, 50)}];
})"""


@pytest.mark.timeout(300)
def test_the_site_in_headless_chromium(served: str, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip(f"no chromium at {CHROMIUM} (CI installs Debian's chromium; see .ci/run)")
    from playwright.sync_api import sync_playwright

    report = re.search(r"^# (.+)$", (ROOT / "reports" / "padding.md").read_text(), re.M)
    assert report is not None
    report_title = report.group(1).replace("`", "")
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
                assert page.title() == (title or f"{report_title} - dsampler")
                shown = page.locator("article h1").first.inner_text().strip().rstrip("¶")
                assert shown.strip() == (heading or report_title)
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

            phone = browser.new_page(viewport=PHONE)
            phone.set_default_timeout(60_000)
            phone.on("pageerror", lambda error: errors.append(str(error)))
            phone.goto(served + COMMANDS, wait_until="load")
            phone.locator("article pre .md-code__nav").first.wait_for(state="attached")
            blocks = phone.evaluate(COVERED)
            assert [block for block in blocks if block["lines"] == 1]  # one-line commands
            assert [block["start"] for block in blocks if block["covered"]] == []
            shot = tmp_path / "phone.png"
            phone.locator("article pre").first.scroll_into_view_if_needed()
            phone.screenshot(path=str(shot))
            print(f"screenshot of {COMMANDS} at {PHONE['width']} pixels: {shot}")
        finally:
            browser.close()
    assert errors == []
