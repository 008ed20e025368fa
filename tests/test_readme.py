"""README.md is the front page: the two commands first, CI running the second, and short, the rest on the site.

Its snippets, tables and paths are checked with the site's pages by tests/test_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    head = (ROOT / "README.md").read_text()[:1200]
    assert "bash scripts/demo.sh" in head and "bash scripts/test.sh" in head
    assert "`.ci/run` runs exactly `bash scripts/test.sh`." in head
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash scripts/test.sh$", ci, re.MULTILINE)


def test_readme_is_at_most_250_lines_and_links_into_the_site() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "the user guide and references belong on the site (docs/)"
    assert re.search(r"\]\(docs/getting-started\.md\)", readme)
