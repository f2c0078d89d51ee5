"""Import layering of the pass infrastructure.

* The instruments sit beside the pass infrastructure, not on top of it: no module of
  ``passinfra.instrument`` imports ``passinfra.transform`` when it runs (type hints only),
  so the infrastructure can import the instruments without a cycle.
* ``passinfra/transform`` is the infrastructure and ``passinfra/transform/builtin`` the
  pass library written against it: no infrastructure module imports the library (nor the
  package namespace that re-exports it), except the package ``__init__``, the one place
  that names it, to re-export the built-in passes. The library reaches the
  infrastructure through its modules, never through the package namespace, which is
  still being built while the library loads.
* The modules of the two import each other without a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import passinfra.instrument
import passinfra.transform
from passinfra.transform import builtin

INSTRUMENT_DIR = Path(passinfra.instrument.__file__).parent
TRANSFORM_DIR = Path(passinfra.transform.__file__).parent
BUILTIN_DIR = Path(builtin.__file__).parent
PACKAGE = "passinfra.transform"
LIBRARY = f"{PACKAGE}.builtin"


def _without_type_checking_blocks(tree: ast.Module) -> ast.Module:
    """``tree`` with the bodies of its ``if TYPE_CHECKING:`` blocks emptied (in place)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []  # what only type checkers see
    return tree


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Modules imported outside ``if TYPE_CHECKING:`` blocks."""
    found = []
    for node in ast.walk(_without_type_checking_blocks(tree)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def _imported(path: Path, runtime_only: bool = False) -> set[str]:
    """Every module ``path`` imports, ``from package import submodule`` read as the
    submodule, and a name taken from a package's namespace read as the package."""
    tree = ast.parse(path.read_text())
    if runtime_only:
        tree = _without_type_checking_blocks(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if _is_module(submodule) else node.module)
    return found


def _is_module(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[:2] != ["passinfra", "transform"]:
        return False
    path = TRANSFORM_DIR.joinpath(*parts[2:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_name(path: Path) -> str:
    relative = path.relative_to(TRANSFORM_DIR).with_suffix("")
    parts = [part for part in relative.parts if part != "__init__"]
    return ".".join([PACKAGE, *parts])


def _infrastructure_modules() -> list[Path]:
    return sorted(path for path in TRANSFORM_DIR.glob("*.py") if path.name != "__init__.py")


def _library_modules() -> list[Path]:
    return sorted(BUILTIN_DIR.glob("*.py"))


def test_no_instrument_imports_the_pass_infrastructure_at_run_time():
    offenders = {
        path.name: module
        for path in sorted(INSTRUMENT_DIR.glob("*.py"))
        for module in _runtime_imports(ast.parse(path.read_text()))
        if module == "passinfra.transform" or module.startswith("passinfra.transform.")
    }
    assert not offenders, offenders


def test_the_pass_errors_keep_their_names():
    from passinfra import errors
    from passinfra.transform import PassNotFoundError
    from passinfra.transform import errors as transform_errors

    assert PassNotFoundError is errors.PassNotFoundError is transform_errors.PassNotFoundError
    assert issubclass(transform_errors.PassRegistrationError, errors.PassError)


def test_the_infrastructure_never_imports_the_pass_library():
    """Type hints included: the infrastructure is what a reader holds in their head."""
    assert _infrastructure_modules(), "no infrastructure modules found"
    offenders = {
        path.name: sorted(
            module for module in _imported(path)
            if module in (PACKAGE, LIBRARY) or module.startswith(f"{LIBRARY}.")
        )
        for path in _infrastructure_modules()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_package_init_is_the_one_place_that_names_the_library():
    library_imports = {
        module for module in _imported(TRANSFORM_DIR / "__init__.py")
        if module == LIBRARY or module.startswith(f"{LIBRARY}.")
    }
    assert library_imports == {LIBRARY}  # the library's own package, which registers every pass
    # and it re-exports every built-in pass, the very objects, each registered
    assert passinfra.transform.BUILTIN_PASSES == builtin.__all__
    for name in builtin.__all__:
        assert getattr(passinfra.transform, name) is getattr(builtin, name)
        assert name in passinfra.transform.list_passes()


def test_the_library_reaches_the_infrastructure_through_its_modules():
    offenders = {
        path.name: sorted(
            module for module in _imported(path)
            if module == PACKAGE or module.split(".")[0] in ("scheduler", "workers", "raypass_cli")
        )
        for path in _library_modules()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_pass_infrastructure_and_library_import_each_other_without_a_cycle():
    """Run-time imports between the modules of ``passinfra/transform`` (the packages'
    ``__init__`` files aside: they only gather and re-export)."""
    graph = nx.DiGraph()
    for path in _infrastructure_modules() + _library_modules():
        if path.name == "__init__.py":
            continue
        name = _module_name(path)
        graph.add_node(name)
        for module in _imported(path, runtime_only=True):
            if module.startswith(f"{PACKAGE}.") and module != LIBRARY:
                graph.add_edge(name, module)
    assert len(graph) > 30
    assert nx.is_directed_acyclic_graph(graph), nx.find_cycle(graph)
