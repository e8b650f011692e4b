"""The code examples in README.md and docs/ run."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_python_examples_run(path):
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    assert blocks or path.name == "README.md"
    namespace: dict = {}
    for block in blocks:  # blocks of one file share a namespace, as a reader would run them
        exec(compile(block, str(path), "exec"), namespace)


def test_docs_exist():
    for name in ("operator_strategy.md", "adding_an_operator.md", "design.md", "glossary.md"):
        assert (ROOT / "docs" / name).exists()


def test_readme_and_design_link_the_glossary():
    for path in (ROOT / "README.md", ROOT / "docs" / "design.md"):
        assert "glossary.md)" in path.read_text(), path.name
