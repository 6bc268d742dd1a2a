"""A griffe extension for the API reference: the docstrings' reST roles as Markdown.

The docstrings are written for reading in the source and with ``help()``: they name other
objects with roles (``:class:`~samplers.DistributedBatchSampler```) and mark examples and
warnings with reST directives. In the generated reference, a role becomes the name in code
type (``~`` keeps its last part, as in Sphinx), ``.. warning::`` and ``.. note::`` become
admonitions, and a line ending in ``::`` (``Example::``) ends in ``:`` above its indented
code block.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")
DIRECTIVE = re.compile(r"^(\s*)\.\. (warning|note)::\s*$", re.MULTILINE)
LITERAL_BLOCK = re.compile(r"(\S)::$", re.MULTILINE)


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
