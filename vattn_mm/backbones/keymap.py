"""Bidirectional renaming of state-dict keys between an official layout and ours.

A :class:`KeyMap` is an ordered list of ``(official, ours)`` template pairs.  A
template is a literal key fragment with integer placeholders such as
``'block{s+1}.'`` / ``'stages.{s}.blocks.'``: ``{s+1}`` on the official side
and ``{s}`` on our side name the same stage, so the same rule converts both
ways.  Templates that start with ``'.'`` match anywhere inside a key (after a
dot); all others match at the start of the key.  Each rule fires at most once
per key and rules apply in the same order in both directions, so put a
specific rule before a general one that overlaps it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

_PLACEHOLDER = re.compile(r'\{(\w+)([+-]\d+)?\}')


@dataclass(frozen=True)
class _Template:
    text: str
    regex: re.Pattern
    offsets: dict

    @classmethod
    def parse(cls, text: str) -> '_Template':
        pattern, offsets, pos = [], {}, 0
        for m in _PLACEHOLDER.finditer(text):
            pattern.append(re.escape(text[pos:m.start()]))
            name, offset = m.group(1), int(m.group(2) or 0)
            offsets[name] = offset
            pattern.append(f'(?P<{name}>\\d+)')
            pos = m.end()
        pattern.append(re.escape(text[pos:]))
        body = ''.join(pattern)
        anchor = '(?<=[^.])' if text.startswith('.') else '^'
        return cls(text, re.compile(anchor + body), offsets)

    def values(self, match: re.Match) -> dict:
        return {n: int(match.group(n)) - off for n, off in self.offsets.items()}

    def render(self, values: Mapping[str, int]) -> str:
        return _PLACEHOLDER.sub(
            lambda m: str(values[m.group(1)] + int(m.group(2) or 0)),
            self.text)


@dataclass
class KeyMap:
    """Ordered, invertible key renaming rules (official -> ours)."""

    rules: Iterable[tuple[str, str]]
    _pairs: list = field(init=False, repr=False)

    def __post_init__(self):
        self._pairs = [(_Template.parse(a), _Template.parse(b))
                       for a, b in self.rules]

    @staticmethod
    def _apply(key: str, pairs) -> str:
        for src, dst in pairs:
            m = src.regex.search(key)
            if m is not None:
                key = key[:m.start()] + dst.render(src.values(m)) + key[m.end():]
        return key

    def to_ours(self, key: str) -> str:
        return self._apply(key, self._pairs)

    def to_official(self, key: str) -> str:
        return self._apply(key, [(b, a) for a, b in self._pairs])
