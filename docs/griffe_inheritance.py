"""Griffe extensions for the API reference: what the samplers inherit, shown on each.

The samplers inherit from the project's private scaffolding (``SamplerCore``,
``_Mixture``), which the reference does not document: its public members are listed on
each sampler as inherited members instead (``inherited_members`` in ``mkdocs.yml``).

* :class:`PublicBases`: "Bases:" names public classes only. For every class of
  ``samplers`` it stores in ``extra["dsampler"]["bases"]`` the bases the reference shows
  (the templates in ``docs/templates`` render them): those outside ``samplers`` (torch's,
  the frameworks', the builtins) and those of ``samplers`` that a documented module
  exports. The class's own ``bases`` stay as they are, so inherited members still
  resolve through them.
* :class:`InheritedAttributeDocs`: an attribute a class sets again (``self.group = ...``
  in ``__init__``) without a docstring takes the docstring of the attribute of that name
  in its bases (as ``group`` means what ``SamplerCore.group`` says on every sampler);
  otherwise the reference, which leaves out what has no docstring, would drop it.
"""

from __future__ import annotations

from typing import Any

from griffe import Class, Docstring, Extension, Module

PACKAGE = "samplers"
#: The documented modules (docs/reference/), relative to the package; ``*``: each
#: submodule of that one.
DOCUMENTED = ("", "testing", "integrations.*")


def documented_modules(package: Module) -> list[Module]:
    """The package's modules whose exports the reference documents."""
    modules = []
    for name in DOCUMENTED:
        module = package
        for part in filter(None, name.removesuffix(".*").split(".")):
            module = module.modules[part]
        modules.extend(module.modules.values() if name.endswith(".*") else [module])
    return modules


def public_paths(package: Module) -> set[str]:
    """The canonical paths of every object a documented module exports."""
    paths = set()
    for module in documented_modules(package):
        for name in module.exports or ():
            paths.add(module.get_member(str(name)).canonical_path)
    return paths


def classes(module: Module | Class) -> list[Class]:
    """Every class defined in ``module`` (nested classes included), not imported ones."""
    found = []
    for member in module.members.values():
        if member.is_alias:
            continue
        if isinstance(member, Class):
            found.append(member)
        if isinstance(member, (Module, Class)):
            found.extend(classes(member))
    return found


def shown(base: Any, public: set[str]) -> bool:
    """Whether the reference names ``base``: not one of the package's undocumented classes."""
    path = getattr(base, "canonical_path", None)
    if not isinstance(path, str) or not path.startswith(f"{PACKAGE}."):
        return True
    return path in public


class PublicBases(Extension):
    def on_package(self, *, pkg: Module, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        public = public_paths(pkg)
        for cls in classes(pkg):
            cls.extra["dsampler"]["bases"] = [base for base in cls.bases if shown(base, public)]


class InheritedAttributeDocs(Extension):
    def on_package(self, *, pkg: Module, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        for cls in classes(pkg):
            for member in cls.members.values():
                if member.is_alias or not member.is_attribute or member.has_docstring:
                    continue
                for base in cls.mro():
                    inherited = base.members.get(member.name)
                    if inherited is not None and inherited.is_attribute and inherited.has_docstring:
                        member.docstring = Docstring(inherited.docstring.value, parent=member)
                        break
