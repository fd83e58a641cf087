"""The several-nodes example (docs/planner.md, moved from the README) is this code's real output."""

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_nodes_example_is_generated():
    readme = (ROOT / "docs" / "planner.md").read_text(encoding="utf-8")
    section = readme.split("## Several nodes", 1)[1]
    m = re.search(r"```python\n(.*?)\n```\n```\n(.*?)\n```", section, re.S)
    assert m, "the docs example is missing"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(m.group(1), "README", "exec"), {})
    assert out.getvalue().rstrip("\n") == m.group(2)


def test_docs_model_parallel_example_is_generated():
    doc = (ROOT / "docs" / "planner.md").read_text(encoding="utf-8")
    section = doc.split("### Tensor, pipeline and context parallel", 1)[1]
    m = re.search(r"```python\n(.*?)\n```\n```\n(.*?)```", section, re.S)
    assert m, "the docs example is missing"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(m.group(1), "docs", "exec"), {})
    assert out.getvalue() == m.group(2)
