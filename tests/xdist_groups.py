"""Which tests pytest-xdist runs together (``-n 2 --dist loadgroup``, as the README's test
command runs the suite): a pytest plugin, loaded by ``tests/conftest.py``.

* The tests that start real processes (``processes``, ``install``) are one group, run one
  after the other in one worker: two torchrun jobs at once on two cores would time each
  other out.
* The tests that use a module-scoped fixture of their module (a Ray cluster's runs, every
  real-process launch, the reports built once) are grouped by module, so the fixture is
  built once, not once per worker.

xdist reads the groups from the ``xdist_group`` marks in its own
``pytest_collection_modifyitems``, so this hook runs first (``tryfirst``); pytest 9.2
changed how a node's id is stored and xdist 3.8 can no longer add the group to it (every
test is then scheduled alone: ``constraints.txt`` pins pytest below it).
``tests/test_xdist_groups.py`` runs a small suite under ``-n 2 --dist loadgroup`` with this
plugin and checks that each group ran in one worker. Without xdist the marks change
nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The group of the tests that start real processes.
PROCESSES = "processes"


def group_of(item: Any) -> str | None:
    """The xdist group ``item`` belongs to (``None``: scheduled on its own)."""
    if item.get_closest_marker("processes") or item.get_closest_marker("install"):
        return PROCESSES
    info = getattr(item, "_fixtureinfo", None)
    module = getattr(item, "module", None)
    if info is None or module is None:
        return None
    for definitions in info.name2fixturedefs.values():
        for definition in definitions:
            defined_in = getattr(definition.func, "__module__", None)
            if definition.scope == "module" and defined_in == module.__name__:
                return f"module:{module.__name__}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its group (:func:`group_of`) before xdist reads the marks."""
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
