"""docs/training.md's key table lists every key of TrainConfig, section by section, and no other:
a key added to (or removed from) the configuration without the table fails here."""

from __future__ import annotations

import re
import typing

from del_core.training.config import TrainConfig
from helpers.shared import REPO

TABLE_ROW = re.compile(r"^\| `(\w+)` \| (.+) \|$", re.MULTILINE)


def key_table(text: str) -> dict[str, list[str]]:
    """Section -> its listed keys, from the table under the header ``| section | keys |``."""
    table = text.split("| section | keys |\n", 1)[1].split("\n\n", 1)[0]
    return {section: listed_keys(cell) for section, cell in TABLE_ROW.findall(table)}


def listed_keys(cell: str) -> list[str]:
    """The keys a table cell lists: the first backticked name of each comma-separated item, commas
    inside a parenthesised note (``name`` (hub name, HF directory, ...)) left alone."""
    items, depth, current = [], 0, ""
    for char in cell:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [re.match(r"\s*`([^`]+)`", item).group(1) for item in items]


def test_listed_keys_reads_names_not_notes():
    cell = "`name` (hub name, `.gguf` file), `sp` (see [x](y.md#a-b)), `betas`"
    assert listed_keys(cell) == ["name", "sp", "betas"]


def test_the_training_key_table_matches_the_configuration():
    table = key_table((REPO / "docs" / "training.md").read_text())
    sections = typing.get_type_hints(TrainConfig)
    assert list(table) == list(sections)
    for name, section in sections.items():
        keys = list(typing.get_type_hints(section))
        assert sorted(table[name]) == sorted(keys), f"docs/training.md, section {name}"
