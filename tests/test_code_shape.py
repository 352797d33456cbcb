"""The shape of the code a newcomer reads: no module of the platform over ~600 lines without its reason at the top."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "training_platform"
LIMIT = 600
REASON = re.compile(r"over 600 lines", re.IGNORECASE)


def test_long_modules_say_why_at_the_top():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:  # frozen history: each revision is what it was
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LIMIT and not any(REASON.search(line) for line in lines[:3]):
            unexplained.append(f"{path.relative_to(PACKAGE.parent)}: {len(lines)} lines")
    assert not unexplained, "split these, or write the reason in their first lines:\n" + "\n".join(unexplained)


def test_the_suite_split_names_units_that_exist():
    """tests/conftest.py orders the xdist units longest first by name: a renamed test file must not drop out."""
    import importlib.util

    # By path: the module name `conftest` may already be another directory's conftest.py in this process.
    spec = importlib.util.spec_from_file_location("tests_root_conftest", Path(__file__).with_name("conftest.py"))
    assert spec and spec.loader
    split = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(split)
    root = Path(__file__).resolve().parents[1]
    missing = [unit for unit in (*split.LONGEST_FIRST, *split.SHARED_UNITS) if not (root / unit).exists()]
    assert not missing, f"tests/conftest.py names units that do not exist: {missing}"
