"""Render the README's feature table from feature_list.json, so the two cannot drift.

    python scripts/feature_table.py            # print the table
    python scripts/feature_table.py --write    # replace the block between the markers in README.md
    python scripts/feature_table.py --check    # exit 1 when README.md's block differs from what would be rendered

tests/test_feature_list.py imports `render` and `extract_block` and fails when the README's block is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FEATURES = REPO / "feature_list.json"
README = REPO / "README.md"
START = "<!-- features:start -->"
END = "<!-- features:end -->"


def load(path: Path = FEATURES) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _cell(text: str) -> str:
    """One Markdown table cell: no line breaks, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _proved_by(tests: list[str]) -> str:
    files: list[str] = []
    for node in tests:
        name = node.split("::", 1)[0].removeprefix("tests/")
        if name not in files:
            files.append(name)
    count = f"{len(tests)} test{'s' if len(tests) != 1 else ''}"
    return f"{count}: " + ", ".join(f"`{name}`" for name in files)


def render(doc: dict) -> str:
    """The generated block (without the markers): a table of every feature, in the file's order."""
    lines = [
        "<!-- generated from feature_list.json by scripts/feature_table.py --write; do not edit by hand -->",
        "",
        "| Area | Feature | What it does | Proved by |",
        "|---|---|---|---|",
    ]
    for feature in doc["features"]:
        cells = [feature["area"], feature["name"], feature["description"], _proved_by(feature["tests"])]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    areas = {feature["area"] for feature in doc["features"]}
    tests = {node for feature in doc["features"] for node in feature["tests"]}
    lines += ["", f"{len(doc['features'])} features in {len(areas)} areas, proved by {len(tests)} distinct tests."]
    return "\n".join(lines) + "\n"


def extract_block(text: str) -> str:
    """What README.md holds between the markers (the newline after the start marker excluded)."""
    if text.count(START) != 1 or text.count(END) != 1:
        raise ValueError(f"README.md must hold exactly one {START} and one {END}")
    _, _, rest = text.partition(START)
    block, _, _ = rest.partition(END)
    return block.removeprefix("\n")


def replace_block(text: str, block: str) -> str:
    extract_block(text)  # the markers are there, once each
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{block}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the generated block in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md's block is not up to date")
    args = parser.parse_args(argv)

    block = render(load())
    if args.write or args.check:
        text = README.read_text(encoding="utf-8")
        current = extract_block(text)
        if args.check:
            if current != block:
                print(
                    "README.md's feature table is stale: run python scripts/feature_table.py --write", file=sys.stderr
                )
                return 1
            return 0
        if current != block:
            README.write_text(replace_block(text, block), encoding="utf-8")
            print("README.md: feature table updated")
        return 0
    sys.stdout.write(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
