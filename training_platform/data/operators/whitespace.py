"""normalize_whitespace: unicode spaces to plain spaces, zero-width characters removed, runs of spaces collapsed
(indentation kept), trailing spaces and excess blank lines removed, text stripped."""

from __future__ import annotations

import re

from pydantic import Field

from training_platform.data.operators.base import Mapper, OpContext, OpParams, register_operator

_UNICODE_SPACES = re.compile(r"[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
_ZERO_WIDTH = re.compile(r"[\u200b\u200c\u200d\u2060\ufeff]")
_INNER_RUNS = re.compile(r"(?<=\S)[ \t]{2,}")
_ALL_RUNS = re.compile(r"[ \t]{2,}")
_TRAILING = re.compile(r"[ \t]+(?=\n|$)")


class WhitespaceParams(OpParams):
    collapse_spaces: bool = Field(True, description="Runs of spaces/tabs inside a line become one space.")
    keep_indentation: bool = Field(True, description="Leave leading spaces of a line alone (code).")
    max_blank_lines: int = Field(1, ge=0, le=1_000_000, description="At most this many consecutive blank lines.")
    strip: bool = Field(True, description="Strip each text and the trailing spaces of each line.")
    unicode_spaces: bool = Field(True, description="No-break and other unicode spaces become plain spaces.")
    remove_zero_width: bool = Field(True, description="Drop zero-width spaces/joiners and BOMs.")


@register_operator("normalize_whitespace", WhitespaceParams)
class NormalizeWhitespace(Mapper[WhitespaceParams]):
    def __init__(self, params: WhitespaceParams, ctx: OpContext):
        super().__init__(params, ctx)
        self._blank = re.compile(r"\n{" + str(params.max_blank_lines + 2) + ",}")
        self._blank_to = "\n" * (params.max_blank_lines + 1)

    def map_text(self, text: str) -> str:
        p = self.params
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if p.unicode_spaces:
            text = _UNICODE_SPACES.sub(" ", text)
        if p.remove_zero_width:
            text = _ZERO_WIDTH.sub("", text)
        if p.collapse_spaces:
            text = (_INNER_RUNS if p.keep_indentation else _ALL_RUNS).sub(" ", text)
        if p.strip:
            text = _TRAILING.sub("", text).strip()
        return self._blank.sub(self._blank_to, text)
