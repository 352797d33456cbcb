"""normalize_punctuation: typographic quotes, dashes, ellipses and fullwidth punctuation to ASCII; long runs of the
same punctuation mark shortened."""

from __future__ import annotations

import re

from pydantic import Field

from training_platform.data.operators.base import Mapper, OpContext, OpParams, register_operator

_QUOTES = str.maketrans(
    {
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2033": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u2039": "'",
        "\u203a": "'",
    }
)
_DASHES = str.maketrans(
    {"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-"}
)
_FULLWIDTH = str.maketrans(
    {
        "\uff01": "!",
        "\uff1f": "?",
        "\uff0c": ",",
        "\u3002": ".",
        "\uff0e": ".",
        "\uff1a": ":",
        "\uff1b": ";",
        "\uff08": "(",
        "\uff09": ")",
        "\u3001": ",",
        "\uff3b": "[",
        "\uff3d": "]",
        "\uff5b": "{",
        "\uff5d": "}",
        "\uff02": '"',
        "\uff07": "'",
    }
)


class PunctuationParams(OpParams):
    quotes: bool = Field(True, description="Curly/angle quotes to \" and '.")
    dashes: bool = Field(True, description="En/em dashes, minus sign, hyphen variants to '-'.")
    ellipsis: bool = Field(True, description="The ellipsis character to '...'.")
    fullwidth: bool = Field(True, description="Fullwidth/CJK punctuation to ASCII.")
    max_repeat: int | None = Field(
        3,
        ge=1,
        le=1000,
        description="Runs of one punctuation mark longer than this are cut to this length (null: keep).",
    )


@register_operator("normalize_punctuation", PunctuationParams)
class NormalizePunctuation(Mapper[PunctuationParams]):
    def __init__(self, params: PunctuationParams, ctx: OpContext):
        super().__init__(params, ctx)
        table: dict[int, str] = {}
        for enabled, part in ((params.quotes, _QUOTES), (params.dashes, _DASHES), (params.fullwidth, _FULLWIDTH)):
            if enabled:
                table.update(part)
        if params.ellipsis:
            table[ord("\u2026")] = "..."
        self._table = table
        self._runs = (
            re.compile(r"([!?.,;:\-*=~_#])\1{" + str(params.max_repeat) + ",}")
            if params.max_repeat is not None
            else None
        )

    def map_text(self, text: str) -> str:
        text = text.translate(self._table)
        max_repeat = self.params.max_repeat
        if self._runs is not None and max_repeat is not None:  # _runs is compiled exactly when max_repeat is set
            text = self._runs.sub(lambda m: m.group(1) * max_repeat, text)
        return text
