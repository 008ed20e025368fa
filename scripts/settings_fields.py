"""Rewrite scaler/settings_fields.py from the declarations in scaler/config.py: `python scripts/settings_fields.py`.

The settings objects get their slots from the declarations at run time, which mypy cannot see; the generated classes
state each attribute's type for it. tests/test_settings.py fails when the file differs from what this writes.
"""

from __future__ import annotations

import os

from scaler.config import FIELDS_PATH, settings_fields_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    path = os.path.join(ROOT, FIELDS_PATH)
    with open(path) as file:
        text = file.read()
    updated = settings_fields_source()
    if updated != text:
        with open(path, "w") as file:
            file.write(updated)
        print(f"{FIELDS_PATH}: rewritten")
    else:
        print(f"{FIELDS_PATH}: already matches the declarations")


if __name__ == "__main__":
    main()
