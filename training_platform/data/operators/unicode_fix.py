"""fix_unicode: repair mojibake and broken Unicode with ftfy, normalise (NFC by default), drop control characters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.data.operators.base import Mapper, OpContext, OpParams, register_operator


class FixUnicodeParams(OpParams):
    normalization: Literal["NFC", "NFKC", "NFD", "NFKD"] | None = Field("NFC", description="Unicode normal form.")
    fix_encoding: bool = Field(True, description="Undo mojibake (UTF-8 decoded as Latin-1/cp1252, ...).")
    remove_control_chars: bool = Field(True, description="Drop control characters other than newline and tab.")
    fix_character_width: bool = Field(False, description="Fullwidth/halfwidth forms to their standard width.")


@register_operator("fix_unicode", FixUnicodeParams)
class FixUnicode(Mapper[FixUnicodeParams]):
    def __init__(self, params: FixUnicodeParams, ctx: OpContext):
        super().__init__(params, ctx)
        import ftfy

        self._config = ftfy.TextFixerConfig(
            unescape_html=False,
            uncurl_quotes=False,
            explain=False,
            normalization=params.normalization,
            fix_encoding=params.fix_encoding,
            remove_control_chars=params.remove_control_chars,
            fix_character_width=params.fix_character_width,
        )
        self._fix = ftfy.fix_text

    def map_text(self, text: str) -> str:
        return self._fix(text, config=self._config)
