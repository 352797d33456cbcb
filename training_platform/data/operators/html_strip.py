"""strip_html: remove HTML tags and comments (script/style blocks with their content), turn block tags into line
breaks, unescape entities. By default only real HTML tag names are stripped, so `List<T>`, `a < b` and chat markers
such as `<|im_start|>` survive."""

from __future__ import annotations

import html
import re

from pydantic import Field

from training_platform.data.operators.base import Mapper, OpContext, OpParams, register_operator

_TAG_LIST = (
    "a abbr address area article aside audio b base bdi bdo blockquote body br button canvas caption cite code col "
    "colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset figcaption figure font footer form "
    "h1 h2 h3 h4 h5 h6 head header hr html i iframe img input ins kbd label legend li link main map mark meta meter "
    "nav noscript object ol optgroup option output p param picture pre progress q s samp script section select small "
    "source span strong style sub summary sup svg table tbody td template textarea tfoot th thead time title tr "
    "track u ul var video wbr center big strike tt"
)
HTML_TAGS = _TAG_LIST.split()
_BLOCK = {
    "br",
    "p",
    "div",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "table",
    "section",
    "article",
    "header",
    "footer",
    "blockquote",
    "pre",
    "hr",
    "dt",
    "dd",
}
_SCRIPT_STYLE = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_ANY_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?/?>")
_TAG_NAMES = "|".join(sorted(HTML_TAGS, key=len, reverse=True))
_KNOWN_TAG = re.compile(r"</?(" + _TAG_NAMES + r")(?:\s[^<>]*)?/?>", re.IGNORECASE)
_BLANKS = re.compile(r"\n{3,}")


class HtmlParams(OpParams):
    only_known_tags: bool = Field(True, description="Strip only standard HTML tag names (keeps List<T>, <|x|>).")
    drop_script_style: bool = Field(True, description="Remove <script>/<style> blocks with their content.")
    unescape_entities: bool = Field(True, description="&amp; &lt; &#39; ... to characters.")
    block_newlines: bool = Field(True, description="Block tags (<p>, <br>, <li>, ...) become line breaks.")


@register_operator("strip_html", HtmlParams)
class StripHtml(Mapper[HtmlParams]):
    def __init__(self, params: HtmlParams, ctx: OpContext):
        super().__init__(params, ctx)
        self._tag = _KNOWN_TAG if params.only_known_tags else _ANY_TAG

    def _replace(self, match: re.Match) -> str:
        if self.params.block_newlines and match.group(1).lower() in _BLOCK:
            return "\n"
        return ""

    def map_text(self, text: str) -> str:
        if "<" not in text and "&" not in text:
            return text
        out = text
        if "<" in out:
            if self.params.drop_script_style:
                out = _SCRIPT_STYLE.sub("", out)
            out = _COMMENT.sub("", out)
            out = self._tag.sub(self._replace, out)
            if out != text:
                out = _BLANKS.sub("\n\n", out).strip()
        if self.params.unescape_entities and "&" in out:
            out = html.unescape(out)
        return out
