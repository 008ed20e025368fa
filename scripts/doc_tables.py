"""Rewrite the generated tables of README.md and docs/: `python scripts/doc_tables.py` (`--check`: only report).

Two kinds of blocks are generated, each between its markers:

- `<!-- options: COMMAND COMPONENT... -->` ... `<!-- /options -->`: the settings of those components, from their
  declarations in scaler/config.py (flags, keyword, default, meaning);
- `<!-- cli-options: COMMAND [COMPONENT...] -->` ... `<!-- /cli-options -->`: every other argument of COMMAND's
  parser (its console script's module's build_parser()), leaving out the settings of the COMPONENTs listed, which
  have a table of the first kind.

tests/test_docs.py fails when a page's table differs from what this writes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scaler.config import SETTINGS  # noqa: E402
from scaler.settings_spec import fill_option_tables  # noqa: E402

CLI_TABLE = re.compile(r"(<!-- cli-options: (\S+)((?: \w+)*) -->\n)(.*?)(<!-- /cli-options -->)", re.DOTALL)
DEFAULT_IN_HELP = re.compile(r" \(default: ([^()]*(?:\([^()]*\)[^()]*)*)\)$")


def pages() -> Iterator[Path]:
    """README.md and every page of the site."""
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))


def console_scripts() -> Dict[str, str]:
    """Each console script of pyproject.toml and its module (tomllib is 3.11+; this runs on 3.9 too)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text[text.index("[project.scripts]") :].split("\n[", 1)[0]
    return dict(re.findall(r'^(\w+) = "([\w.]+):\w+"$', section, re.MULTILINE))


def build_parser(command: str) -> argparse.ArgumentParser:
    return importlib.import_module(console_scripts()[command]).build_parser()


def argument_table(command: str, components: List[str]) -> str:
    """The arguments of COMMAND that are not settings of `components`: name or flags, default, meaning."""
    parser = build_parser(command)
    skip = set(SETTINGS.names(*components)) if components else set()
    rows = [f"| `{command}` option | default | meaning |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS or action.dest in skip:
            continue
        if action.option_strings:
            name = ", ".join(f"`{flag}`" for flag in action.option_strings)
        else:
            name = f"`{action.metavar or action.dest.upper()}`"
        meaning = (action.help or "") % {**vars(action), "prog": parser.prog}
        found = DEFAULT_IN_HELP.search(meaning)
        if found:
            default, meaning = found.group(1), meaning[: found.start()]
        elif action.required:
            default = "required"
        elif isinstance(action, argparse._StoreTrueAction):
            default = "off"
        elif not action.option_strings or action.default is None or action.default == []:
            default = ""
        elif isinstance(action.default, (list, tuple)):
            default = " ".join(map(str, action.default))
        else:
            default = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
        choices = [str(choice) for choice in action.choices or ()]
        if choices and not any(re.search(rf"\b{re.escape(choice)}\b", meaning) for choice in choices):
            meaning += ": " + ", ".join(f"`{choice}`" for choice in choices)  # unless the help names them
        cells = [name, default, meaning]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def fill_tables(text: str) -> str:
    """`text` with every generated table rewritten."""

    def cli_table(match: re.Match) -> str:
        start, command, components, _, end = match.groups()
        return start + argument_table(command, components.split()) + end

    return CLI_TABLE.sub(cli_table, fill_option_tables(text, SETTINGS))


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for path in pages():
        text = path.read_text()
        updated = fill_tables(text)
        if updated != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                path.write_text(updated)
    verb = "stale" if check else "rewritten"
    print(f"tables {verb}: {', '.join(stale)}" if stale else "every table matches the declarations and parsers")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
