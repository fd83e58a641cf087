"""The several-nodes and model-parallel examples of docs/planner.md are this code's real output."""

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("heading", ["## Several nodes", "### Tensor, pipeline and context parallel"])
def test_docs_example_is_generated(heading):
    doc = (ROOT / "docs" / "planner.md").read_text(encoding="utf-8")
    section = doc.split(heading, 1)[1]
    m = re.search(r"```python\n(.*?)\n```\n```\n(.*?)```", section, re.S)
    assert m, "the docs example is missing"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(m.group(1), "docs", "exec"), {})
    assert out.getvalue() == m.group(2)
