"""Griffe extensions for the API reference: the docstrings' reST roles as Markdown, and
attributes documented by ``#:`` comments.

The docstrings are written for reading in the source and with ``help()``: they name other
objects with roles (``:class:`~samplers.DistributedBatchSampler```) and mark examples and
warnings with reST directives. In the generated reference, a role becomes the name in code
type (``~`` keeps its last part, as in Sphinx), ``.. warning::`` and ``.. note::`` become
admonitions, and a line ending in ``::`` (``Example::``) ends in ``:`` above its indented
code block (:class:`RolesToMarkdown`).

An attribute is documented, as Sphinx reads it, by the ``#:`` comment lines right above
its assignment; one without a docstring takes them as its docstring (:class:`DocComments`,
listed before :class:`RolesToMarkdown`, which then converts their roles).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Docstring, Extension

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")
DIRECTIVE = re.compile(r"^(\s*)\.\. (warning|note)::\s*$", re.MULTILINE)
LITERAL_BLOCK = re.compile(r"(\S)::$", re.MULTILINE)
DOC_COMMENT = re.compile(r"^\s*#: ?(.*)$")


def markdown(docstring: str) -> str:
    """``docstring`` with its roles and directives written in Markdown."""
    docstring = ROLE.sub(
        lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", docstring
    )
    docstring = DIRECTIVE.sub(lambda m: f"{m.group(1)}!!! {m.group(2)}", docstring)
    return LITERAL_BLOCK.sub(r"\1:", docstring)


class RolesToMarkdown(Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)


def doc_comment(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (from 1) of ``lines``, as one
    text without their marks; ``None`` when there are none."""
    found = []
    index = lineno - 2
    while index >= 0 and (match := DOC_COMMENT.match(lines[index])):
        found.append(match.group(1))
        index -= 1
    return "\n".join(reversed(found)) or None


class DocComments(Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if not obj.is_attribute or obj.docstring is not None or obj.lineno is None:
            return
        try:
            lines = obj.lines_collection[obj.filepath]
        except KeyError:
            return
        text = doc_comment(lines, obj.lineno)
        if text is not None:
            obj.docstring = Docstring(text, parent=obj)
