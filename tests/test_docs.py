"""The README and the documentation site (docs/, mkdocs.yml) say what the code does.

- Every Python snippet is an example file: marked `<!-- example: PATH -->`, equal to that file, and every file of
  examples/ is shown somewhere (tests/e2e/test_examples.py runs each one and checks what it prints).
- Every option table is generated from the settings' declarations and the commands' parsers (scripts/doc_tables.py).
- Every bench/, examples/, scripts/, tests/, deploy/ and packaging/ path named on a page exists, and so does every
  file the README links to (mkdocs build --strict checks the site's own links); so does every module a page runs with
  `python -m`.
- The tables of errors list what scaler.errors and scaler.utility.exceptions define.
"""

from __future__ import annotations

import argparse
import builtins
import concurrent.futures
import importlib
import importlib.util
import inspect
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

import scaler.errors

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKED_BLOCK = re.compile(r"<!-- example: (\S+) -->\n```(\w+)\n(.*?)```", re.DOTALL)
FENCE = re.compile(r"^```(\w*)\n", re.MULTILINE)
NAMED_PATH = re.compile(r"(?<![\w./-])((?:bench|examples|scripts|tests|deploy|packaging)/[\w./*-]*[\w/])")
RUN_MODULE = re.compile(r"\b(?:python|pypy)3?\s+-m\s+([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def load_doc_tables():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def text_between(page: str, marker: str) -> str:
    text = (ROOT / page).read_text()
    return text[text.index(f"<!-- {marker} -->") : text.index(f"<!-- /{marker} -->")]


def table_rows(text: str) -> List[List[str]]:
    """The cells of each row of the Markdown tables in `text`, header and separator rows left out."""
    rows = [re.split(r"(?<!\\)\|", line.strip()[1:-1]) for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[2:]] if rows else []


# ---- snippets -------------------------------------------------------------------------------------------------------


def test_marked_snippets_are_the_files() -> None:
    for page in PAGES:
        for path, _, code in MARKED_BLOCK.findall(page.read_text()):
            assert code == (ROOT / path).read_text(), f"{page_name(page)}: the block for {path} differs from the file"


def test_every_python_block_is_a_marked_example_file() -> None:
    for page in PAGES:
        text = page.read_text()
        marked = {match.start(2) - len("```") for match in MARKED_BLOCK.finditer(text)}
        for fence in FENCE.finditer(text):
            if fence.group(1) in ("python", "py", "pycon"):
                assert fence.start() in marked, f"{page_name(page)}: a Python block that is not an example file"
        for path, language, _ in MARKED_BLOCK.findall(text):
            if language == "python":
                assert path.startswith("examples/"), f"{page_name(page)}: {path} is not under examples/"


def test_every_example_is_shown() -> None:
    shown = {path for page in PAGES for path, _, _ in MARKED_BLOCK.findall(page.read_text())}
    examples = {f"examples/{path.name}" for path in (ROOT / "examples").glob("*.py")}
    assert examples <= shown, f"examples shown on no page: {sorted(examples - shown)}"


# ---- generated tables -----------------------------------------------------------------------------------------------


def test_every_table_is_generated() -> None:
    doc_tables = load_doc_tables()
    for page in PAGES:
        text = page.read_text()
        assert doc_tables.fill_tables(text) == text, f"{page_name(page)} is stale: run python scripts/doc_tables.py"


def test_every_command_has_all_its_options_in_the_reference() -> None:
    doc_tables = load_doc_tables()
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text()
    documented: Dict[str, Set[str]] = {}  # command -> the flags its tables show (a table's header names its command)
    for table in re.finditer(r"^\| `(\w+)` option \|.*?(?=\n(?!\|)|\Z)", reference, re.MULTILINE | re.DOTALL):
        documented.setdefault(table.group(1), set()).update(re.findall(r"`(--?[\w-]+)`", table.group(0)))
    modules = doc_tables.console_scripts()
    aliases = {name for name in modules if any(other < name and modules[other] == modules[name] for other in modules)}
    assert set(documented) == set(modules) - aliases, "each console script has its tables, under its own name"
    for command, flags in documented.items():
        parser = doc_tables.build_parser(command)
        shown = {
            flag for action in parser._actions if action.help != argparse.SUPPRESS for flag in action.option_strings
        }
        missing = shown - {"-h", "--help"} - flags
        assert not missing, f"{command}: options missing from docs/reference/cli.md: {sorted(missing)}"


# ---- paths ----------------------------------------------------------------------------------------------------------


def ignored_by_git(path: str) -> bool:
    """As a file or as a folder (a pattern like `keys/` matches folders only)."""
    found = subprocess.run(["git", "check-ignore", path, path + "/"], cwd=ROOT, capture_output=True, text=True)
    assert found.returncode in (0, 1), found.stderr  # 1: neither is ignored; anything else: git failed
    return found.returncode == 0


def test_every_named_path_exists() -> None:
    missing = []
    for page in PAGES:
        for path in set(NAMED_PATH.findall(page.read_text())):
            found = list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
            if not found and not ignored_by_git(path):  # an ignored path is one a page says to make (keys, builds)
                missing.append(f"{page_name(page)}: {path}")
    assert not missing, "paths named on pages but not in the repository:\n" + "\n".join(sorted(missing))


def runnable_module(name: str) -> bool:
    """`python -m name` would run something: a module, or a package with a __main__. One of this repository's top-level
    packages is looked up as files (importing bench or tests would be slow); any other name as the interpreter would."""
    parts = name.split(".")
    if (ROOT / parts[0]).is_dir():
        path = ROOT.joinpath(*parts)
        return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")
    except ImportError:  # a parent package that does not exist
        return False
    return spec is not None


def test_every_module_run_with_python_m_exists() -> None:
    assert RUN_MODULE.findall("`.venv/bin/python -m bench.x --repeat 5`, `pypy3 -m venv`") == ["bench.x", "venv"]
    assert runnable_module("bench.peers.actors") and runnable_module("scaler.scheduler") and runnable_module("venv")
    assert not runnable_module("bench.actors") and not runnable_module("no_such.module")
    missing = []
    for page in PAGES:
        for name in sorted(set(RUN_MODULE.findall(page.read_text()))):
            if not runnable_module(name):
                missing.append(f"{page_name(page)}: python -m {name}")
    assert not missing, "modules run on pages but found nowhere:\n" + "\n".join(missing)


def test_the_readme_links_to_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert links
    assert [link for link in links if not (ROOT / link).exists()] == []


# ---- errors ---------------------------------------------------------------------------------------------------------


def resolve(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module) if module else builtins, name)


def test_the_errors_page_lists_every_error_and_its_bases() -> None:
    rows = table_rows(text_between("docs/reference/errors.md", "errors"))
    listed = {row[0].strip("`"): row[1] for row in rows}
    defined = {
        name for name, value in vars(scaler.errors).items() if inspect.isclass(value) and issubclass(value, Exception)
    }
    assert set(listed) == defined
    for name, bases in listed.items():
        for base in re.findall(r"`([\w.]+)`", bases):
            assert issubclass(getattr(scaler.errors, name), resolve(base)), f"{name} is not a {base}"


def test_the_ray_table_lists_every_ray_name_and_its_bases() -> None:
    from scaler.compat.ray import exceptions as ray_exceptions

    rows = table_rows(text_between("docs/coming-from-ray.md", "ray-exceptions"))
    listed = {row[0].strip("`"): row[1] for row in rows}
    assert set(listed) == set(ray_exceptions.__all__)
    for name, bases in listed.items():
        for base in re.findall(r"`([\w.]+)`", bases):
            base_class = getattr(ray_exceptions, base, None) or resolve(base)
            assert issubclass(getattr(ray_exceptions, name), base_class), f"{name} is not a {base}"


SEED_NAMES = {
    "MissingObjects",
    "WorkerDiedError",
    "ProcessorDiedError",
    "TaskNotFoundError",
    "NoWorkerError",
    "DisconnectedError",
    "DeserializeObjectError",
    "ObjectStorageException",
    "ClientQuitException",
    "ClientCancelledException",
    "ClientShutdownException",
}


def seed_table() -> List[Tuple[str, List[type]]]:
    """Each seed name of docs/coming-from-seeds.md and the classes Scaler raises in its case (none: never raised)."""
    rows = table_rows(text_between("docs/coming-from-seeds.md", "seed-exceptions"))
    raised = [
        (row[0].strip("`"), re.findall(r"`((?:scaler\.errors|concurrent\.futures)\.\w+)`", row[2])) for row in rows
    ]
    return [(name, [resolve(dotted) for dotted in names]) for name, names in raised]


def test_the_seed_table_names_every_seed_exception_and_what_scaler_raises() -> None:
    table = seed_table()
    assert {name for name, _ in table} == SEED_NAMES
    for name, raised in table:
        assert all(issubclass(cls, BaseException) for cls in raised), name
    assert dict(table)["ClientCancelledException"] == [concurrent.futures.CancelledError]


def test_each_seed_name_catches_what_scaler_raises_in_its_case() -> None:
    exceptions = pytest.importorskip("scaler.utility.exceptions")
    for name, raised in seed_table():
        seed_class = getattr(exceptions, name)
        assert issubclass(seed_class, Exception), name
        for cls in raised:
            assert issubclass(cls, seed_class), f"except {name} does not catch {cls.__name__}, as the page says"


# ---- changelog and license ------------------------------------------------------------------------------------------


def test_the_changelog_starts_with_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", changelog, re.MULTILINE)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert versions[:2] == ["Unreleased", version]
    assert (ROOT / "docs" / "changelog.md").read_text() == '--8<-- "CHANGELOG.md"\n'


def test_the_license_is_the_apache_2_0_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    assert len(text.split()) > 1500  # the whole text, not a notice
