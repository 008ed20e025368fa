"""Rewrite README.md's option tables from the declarations in scaler/config.py: `python scripts/readme_options.py`.

Each table sits between `<!-- options: COMMAND COMPONENT... -->` and `<!-- /options -->`; tests/test_settings.py fails
when one differs from what this writes.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scaler.config import SETTINGS  # noqa: E402
from scaler.settings_spec import fill_option_tables  # noqa: E402


def main() -> None:
    path = os.path.join(ROOT, "README.md")
    with open(path) as file:
        text = file.read()
    updated = fill_option_tables(text, SETTINGS)
    if updated != text:
        with open(path, "w") as file:
            file.write(updated)
        print("README.md: option tables rewritten")
    else:
        print("README.md: option tables already match the declarations")


if __name__ == "__main__":
    main()
