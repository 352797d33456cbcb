"""redact_pii: replace e-mail addresses, phone numbers, IP addresses and API-key-like strings with placeholders.
The report counts redactions per kind."""

from __future__ import annotations

import re
from functools import partial
from typing import Literal

from pydantic import Field, field_validator

from training_platform.data.operators.base import Mapper, OpContext, OpParams, register_operator

PiiKind = Literal["api_key", "email", "ip", "phone"]
ORDER: tuple[PiiKind, ...] = ("api_key", "email", "ip", "phone")  # keys first: they contain digits and dots
DEFAULT_PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ip": "<IP_ADDRESS>", "api_key": "<API_KEY>"}

_IPV4_PART = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
PATTERNS: dict[str, re.Pattern[str]] = {
    "api_key": re.compile(
        r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic
        r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
        r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{40,}\b"  # GitHub
        r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
        r"|\bAIza[0-9A-Za-z_-]{35}\b"  # Google
        r"|\bhf_[A-Za-z0-9]{30,}\b"  # Hugging Face
        r"|\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"  # Stripe
    ),
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    "ip": re.compile(
        rf"(?<![\w.]){_IPV4_PART}(?:\.{_IPV4_PART}){{3}}(?!\w|\.\d)"
        r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
        r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4}(?![\w:])"
    ),
    "phone": re.compile(
        r"(?<![\w+])\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{1,4}(?:[\s.-]?\d{2,4}){1,4}(?!\w)"  # +44 20 7946 0958
        r"|(?<![\w(])(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}(?!\w)"  # (555) 123-4567, 555-123-4567
    ),
}
# key = value assignments of secrets: the value is redacted, the key kept.
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b((?:api[_-]?key|secret(?:[_-]?key)?|access[_-]?token|auth[_-]?token|password)"
    r"[\"']?\s*[:=]\s*[\"']?)([A-Za-z0-9_\-./+]{12,})"
)


def _keep_key(placeholder: str, match: re.Match[str]) -> str:
    """A secret assignment with its value replaced (`api_key = <API_KEY>`)."""
    return match.group(1) + placeholder


class PiiParams(OpParams):
    kinds: list[PiiKind] = Field(default_factory=lambda: list(ORDER), description="What to redact.")
    placeholders: dict[str, str] = Field(
        default_factory=dict, description="Replacement per kind (default <EMAIL>, <PHONE>, ...)."
    )

    @field_validator("placeholders")
    @classmethod
    def _known_kinds(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(ORDER))
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; use {list(ORDER)}")
        return value


@register_operator("redact_pii", PiiParams)
class RedactPii(Mapper[PiiParams]):
    def __init__(self, params: PiiParams, ctx: OpContext):
        super().__init__(params, ctx)
        self._kinds = [k for k in ORDER if k in params.kinds]
        self._placeholders = {**DEFAULT_PLACEHOLDERS, **params.placeholders}

    def _phone(self, match: re.Match[str], placeholder: str) -> str:
        if sum(c.isdigit() for c in match.group(0)) < 7:  # too short for a phone number (e.g. "+12 34")
            return match.group(0)
        self.counters["phone"] += 1
        return placeholder

    def map_text(self, text: str) -> str:
        for kind in self._kinds:
            placeholder = self._placeholders[kind]
            if kind == "api_key":
                text, n = _SECRET_ASSIGNMENT.subn(partial(_keep_key, placeholder), text)
                self.counters[kind] += n
            if kind == "phone" and not any(c.isdigit() for c in text):
                continue
            if kind == "phone":
                text = PATTERNS[kind].sub(partial(self._phone, placeholder=placeholder), text)
                continue
            text, n = PATTERNS[kind].subn(placeholder, text)
            self.counters[kind] += n
        return text
