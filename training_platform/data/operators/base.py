"""Cleaning operators: the registry and the two operator kinds.

- A *mapper* rewrites the text strings of a row (unicode fix, whitespace, punctuation, HTML, PII) and never drops it.
- A *filter* keeps or removes a whole row and says why (length, turns, repetition, character ratios).

Adding an operator = one module in this package with a `Params` model and a class decorated with
`@register_operator("name", Params)` that subclasses `Mapper[Params]` or `Filter[Params]` (so `self.params` is typed
as its own model), plus its import in `__init__.py`. Params are pydantic models that reject unknown keys; every
operator accepts `fields` (top-level fields to look at; default: the format's text fields, see
`training_platform.data.text`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from training_platform.data.text import map_texts, row_text


class OpParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    fields: list[str] | None = Field(
        None, description="Top-level fields to look at (default: the format's text fields)."
    )


P = TypeVar("P", bound=OpParams)  # an operator's own params model


@dataclass
class OpContext:
    """What operators share within one run: the rows' format and loaded tokenizers."""

    fmt: str | None = None
    _tokenizers: dict[str, Any] = field(default_factory=dict)

    def tokenizer(self, name_or_path: str) -> Any:
        if name_or_path not in self._tokenizers:
            from training_platform.data.tokenizer import load_tokenizer

            try:
                self._tokenizers[name_or_path] = load_tokenizer(name_or_path)
            except Exception as exc:  # noqa: BLE001 - missing dir, no tokenizer files, offline hub id: all named
                raise ValueError(f"tokenizer {name_or_path!r} cannot be loaded: {exc}") from None
        return self._tokenizers[name_or_path]


class Operator(Generic[P]):
    name: ClassVar[str]
    kind: ClassVar[str]
    Params: ClassVar[type[OpParams]]  # the P of the subclass, set by @register_operator

    def __init__(self, params: P, ctx: OpContext):
        self.params = params
        self.ctx = ctx
        self.counters: Counter[str] = Counter()  # operator-specific counts for the report (e.g. redactions)

    def process(self, row: Any) -> tuple[Any, str | None]:
        """(row, None) to keep (possibly rewritten), (None, reason) to remove."""
        raise NotImplementedError


class Mapper(Operator[P]):
    kind = "mapper"

    def map_text(self, text: str) -> str:
        raise NotImplementedError

    def process(self, row: Any) -> tuple[Any, str | None]:
        return map_texts(row, self.ctx.fmt, self.map_text, self.params.fields), None


class Filter(Operator[P]):
    kind = "filter"

    def check(self, row: Any, text: str) -> str | None:
        """The reason to remove the row, or None to keep it. `text` is the row's text fields joined by newlines."""
        raise NotImplementedError

    def process(self, row: Any) -> tuple[Any, str | None]:
        reason = self.check(row, row_text(row, self.ctx.fmt, self.params.fields))
        return (None, reason) if reason else (row, None)


OPERATORS: dict[str, type[Operator[Any]]] = {}

OpT = TypeVar("OpT", bound=Operator[Any])


def register_operator(name: str, params: type[OpParams]) -> Callable[[type[OpT]], type[OpT]]:
    def decorate(cls: type[OpT]) -> type[OpT]:
        if name in OPERATORS:
            raise ValueError(f"operator {name!r} is registered twice")
        cls.name = name
        cls.Params = params
        OPERATORS[name] = cls
        return cls

    return decorate
