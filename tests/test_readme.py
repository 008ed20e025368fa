"""README's code and examples/ are one text: each `<!-- example: PATH -->` block must equal that file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKED_BLOCK = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```", re.DOTALL)


def test_readme_snippets_are_the_example_scripts() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = MARKED_BLOCK.findall(readme)
    assert blocks, "README.md has no marked example blocks"
    for path, code in blocks:
        assert code == (ROOT / path).read_text(), f"README's block for {path} differs from the file"
    shown = {path for path, _ in blocks}
    scripts = {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.py")}
    assert scripts <= shown, f"examples missing from README: {sorted(scripts - shown)}"


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    head = (ROOT / "README.md").read_text()[:1200]
    assert "bash scripts/demo.sh" in head and "bash scripts/test.sh" in head
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash scripts/test.sh$", ci, re.MULTILINE)
