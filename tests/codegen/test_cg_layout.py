"""Where the code generator's passes live, and what their modules are called.

* Every pass of ``passinfra.codegen`` is registered in ``passes/`` (the build steps) or
  ``transform/`` (the loop passes); no other module of the package registers one.
* A module there registers exactly one pass, and the module is named after it: the
  snake_case of the registered name (``CodegenC`` in ``codegen_c.py``).
* ``passes/__init__.py`` re-exports every build-step factory, and ``passinfra.codegen``
  the very same objects.

Read from the sources (``register_pass(...)`` calls), not from the registry: a test that
overrides a registered pass cannot make this one pass or fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import passinfra.codegen
from passinfra.codegen import passes

CODEGEN_DIR = Path(passinfra.codegen.__file__).parent
PASS_DIRS = (CODEGEN_DIR / "passes", CODEGEN_DIR / "transform")


def _snake_case(pass_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", pass_name).lower()


def _registered_names(path: Path) -> list[str | None]:
    """The names of the ``register_pass(name)`` calls in ``path``: a string literal, or a
    module-level constant bound to one (None when the name is neither)."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets if isinstance(target, ast.Name)
    }
    names: list[str | None] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called != "register_pass" or not node.args:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant):
            names.append(arg.value)
        else:
            names.append(constants.get(arg.id) if isinstance(arg, ast.Name) else None)
    return names


def _pass_modules() -> list[Path]:
    return sorted(path for directory in PASS_DIRS for path in directory.glob("*.py")
                  if path.name != "__init__.py")


@pytest.mark.parametrize("path", _pass_modules(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_pass_module_registers_the_one_pass_it_is_named_after(path):
    names = _registered_names(path)
    assert len(names) == 1 and names[0] is not None, f"{path.name} registers {names}"
    assert _snake_case(names[0]) == path.stem, f"{path.name} registers {names[0]!r}"


def test_no_other_codegen_module_registers_a_pass():
    offenders = sorted(
        str(path.relative_to(CODEGEN_DIR)) for path in CODEGEN_DIR.rglob("*.py")
        if not any(directory in path.parents for directory in PASS_DIRS) and _registered_names(path)
    )
    assert offenders == []


def test_the_build_step_passes_are_exported_by_both_packages():
    registered = sorted(_registered_names(path)[0] for path in (CODEGEN_DIR / "passes").glob("*.py")
                        if path.name != "__init__.py")
    assert sorted(passes.__all__) == registered
    for name in passes.__all__:
        assert getattr(passinfra.codegen, name) is getattr(passes, name)
        assert name in passinfra.codegen.__all__
