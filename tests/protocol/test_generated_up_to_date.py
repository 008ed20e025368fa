"""The committed generated code matches the schema, and the generator refuses what it cannot do (CPython+pycapnp)."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

# pycapnp, the reference, is CPython only: skipped on PyPy, but on CPython a missing pycapnp fails instead of skipping
if sys.implementation.name != "cpython":
    pytest.skip("pycapnp is CPython only", allow_module_level=True)

from scaler.testing.processes import ROOT  # noqa: E402
from tools.fastpath_codegen import generate  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_committed_messages_module_is_up_to_date() -> None:
    assert generate.OUTPUT_PATH.read_text() == generate.render(), (
        "scaler/fastpath/_messages.py is stale: run python3 -m tools.fastpath_codegen.generate"
    )


def test_generation_is_deterministic() -> None:
    # another interpreter with another hash seed: in this process, set and dict orders would repeat whatever they are
    script = "import sys; from tools.fastpath_codegen import generate; sys.stdout.write(generate.render())"
    elsewhere = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=60, check=True, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "1"},
    )  # fmt: skip
    assert elsewhere.stdout == generate.render()


@pytest.mark.parametrize(
    ("declarations", "complaint"),
    [
        ("struct Node { children @0 :List(Node); }", "recursive"),
        ("struct Node { values @0 :List(UInt32); }", "List"),
        ("struct Node { ratio @0 :Float32 = 0.5; }", "float defaults"),
        ("struct Node { inner :group { x @0 :UInt8; } }", "group"),
        ("struct Node { raw @0 :Data; }", "reserved"),
    ],
)
def test_generator_refuses_unsupported_schemas(tmp_path: Path, declarations: str, complaint: str) -> None:
    schema = tmp_path / "unsupported.capnp"
    file_id = f"@0x{0xE000000000000000 | zlib.crc32(declarations.encode()):016x};"  # valid ids have the top bit set
    union = "struct Message { union { node @0 :Node; other @1 :Other; } }"
    schema.write_text(f"{file_id}\n{declarations}\nstruct Other {{ x @0 :UInt8; }}\n{union}\n")
    with pytest.raises(NotImplementedError, match=complaint):
        generate.render(schema)
