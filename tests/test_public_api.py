"""The public API is stated: what `scaler` exports, and which modules are internal (their docstring says so)."""

from __future__ import annotations

import ast
import functools
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import scaler
from scaler import errors

ROOT = Path(__file__).resolve().parent.parent

# modules a user imports; every other module's docstring starts with "Internal:"
PUBLIC = {
    "scaler",
    "scaler.client",
    "scaler.cluster",
    "scaler.compat",
    "scaler.compat.ray",
    "scaler.compat.ray.exceptions",
    "scaler.errors",
    "scaler.joblib",
    "scaler.protocol",
    "scaler.utility",
    "scaler.utility.exceptions",
}
LEFT_TO_MARK = {"scaler.fastpath._messages"}  # generated: its docstring is the generator's


@functools.cache
def modules() -> dict:
    """Every module of the package by name, with the first line of its docstring ("" if none)."""
    found = {}
    for path in sorted((ROOT / "scaler").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[name] = docstring.splitlines()[0] if docstring else ""
    return found


def test_every_exported_name_resolves() -> None:
    assert dir(scaler) == sorted(scaler.__all__)
    for name in scaler.__all__:
        assert getattr(scaler, name) is not None, name


def test_every_error_users_catch_is_exported() -> None:
    defined = {
        name for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    }  # fmt: skip
    assert defined <= set(scaler.__all__), sorted(defined - set(scaler.__all__))
    assert {"Client", "Cluster", "SchedulerClusterCombo"} <= set(scaler.__all__)


def test_importing_scaler_loads_neither_client_nor_cluster() -> None:
    """The scheduler imports the package first: its names load on first use, not with it."""
    script = "import sys, scaler; print(sorted(m for m in sys.modules if m.startswith('scaler.')))"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_module_is_public_or_says_it_is_internal(name: str) -> None:
    first_line = modules()[name]
    if name in PUBLIC:
        assert first_line and not first_line.startswith("Internal:"), f"{name} is public: say what it is"
    elif name in LEFT_TO_MARK:
        assert not first_line.startswith("Internal:"), f"{name} is marked now: take it out of LEFT_TO_MARK"
    else:
        assert first_line.startswith("Internal:"), f"{name}: its docstring's first line should start 'Internal: '"


def test_the_modules_left_to_mark_exist() -> None:
    assert LEFT_TO_MARK <= set(modules()), sorted(LEFT_TO_MARK - set(modules()))
