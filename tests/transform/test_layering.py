"""The instruments sit beside the pass infrastructure, not on top of it: no module of
``passinfra.instrument`` imports ``passinfra.transform`` when it runs (type hints only),
so the infrastructure can import the instruments without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import passinfra.instrument

INSTRUMENT_DIR = Path(passinfra.instrument.__file__).parent


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Modules imported outside ``if TYPE_CHECKING:`` blocks."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []  # what only type checkers see
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


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
