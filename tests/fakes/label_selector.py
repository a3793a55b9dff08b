"""Label selectors as kube-apiserver parses and matches them, for the fake API server.

Behaviour of k8s.io/apimachinery v0.36 ``pkg/labels/selector.go`` (``Lexer``, ``Parser``, ``Requirement.Matches``):
a lexer of identifiers, keywords (``in``, ``notin``) and operator symbols (``=``, ``==``, ``!=``, ``!``, ``(``,
``)``, ``,``, ``<``, ``>``); a parser whose errors are the API server's 400 messages ("unable to parse requirement:
found 'b', expected: in, notin, =, ==, !=, gt, lt", ...). Key and value syntax (``validateLabelKey``) is not checked.
Checked against the real API server in tests/controlplane/test_fake_contract.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SYMBOLS = frozenset("=!(),<>")
WHITESPACE = frozenset(" \t\r\n")
OPERATOR_TOKENS = {"==": "==", "=": "=", "!=": "!=", "!": "!", "(": "(", ")": ")", ",": ",", "<": "<", ">": ">"}
KEYWORDS = {"in", "notin"}
#: selection.Operator values a requirement may use between key and value (the order of the error message)
BINARY = ("in", "notin", "=", "==", "!=", "gt", "lt")
IDENT, END, ERROR = "ident", "end", "error"


class SelectorError(ValueError):
    """The message kube-apiserver answers (400 BadRequest) for a selector it cannot parse."""


def _lex(text: str) -> list[tuple[str, str]]:
    """(token, literal) pairs; the token of a symbol or keyword is its literal."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in WHITESPACE:
            i += 1
        if i >= n:
            out.append((END, ""))
            return out
        if text[i] in SYMBOLS:
            j, last = i, None
            while j < n and text[j] in SYMBOLS:
                if text[i : j + 1] in OPERATOR_TOKENS:
                    last = j + 1
                elif last is not None:
                    break
                j += 1
            if last is None:
                out.append((ERROR, f"error expected: keyword found '{text[i:j]}'"))
                i = j
            else:
                out.append((text[i:last], text[i:last]))
                i = last
            continue
        j = i
        while j < n and text[j] not in SYMBOLS and text[j] not in WHITESPACE:
            j += 1
        word = text[i:j]
        out.append((word if word in KEYWORDS else IDENT, word))
        i = j


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # exists, !, in, notin, =, ==, !=, gt, lt
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        has, value = self.key in labels, labels.get(self.key)
        if self.op in ("in", "=", "=="):
            return has and value in self.values
        if self.op in ("notin", "!="):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if not has:
            return False
        try:
            actual, bound = int(str(value)), int(next(iter(self.values)))
        except ValueError:
            return False
        return actual > bound if self.op == "gt" else actual < bound


class _Parser:
    def __init__(self, text: str) -> None:
        self.items, self.pos = _lex(text), 0

    def peek(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return (IDENT if values and tok in KEYWORDS else tok), lit

    def take(self, values: bool = True) -> tuple[str, str]:
        item = self.peek(values)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        out: list[Requirement] = []
        while True:
            tok, lit = self.peek()
            if tok == END:
                return out
            if tok not in (IDENT, "!"):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                out.append(self.requirement())
            except SelectorError as exc:
                raise SelectorError(f"unable to parse requirement: {exc}") from None
            tok, lit = self.take()
            if tok == END:
                return out
            if tok != ",":
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            tok2, lit2 = self.peek()
            if tok2 not in (IDENT, "!"):
                raise SelectorError(f"found '{lit2}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        tok, key = self.take()
        negated = tok == "!"
        if negated:
            tok, key = self.take()
        if tok != IDENT:
            raise SelectorError(f"found '{key}', expected: identifier")
        if self.peek()[0] in (END, ","):
            return Requirement(key, "!" if negated else "exists", frozenset())
        tok, lit = self.take(values=False)
        op = {"in": "in", "notin": "notin", "=": "=", "==": "==", "!=": "!=", ">": "gt", "<": "lt"}.get(tok)
        if op is None:
            raise SelectorError(f"found '{lit}', expected: {', '.join(BINARY)}")
        return Requirement(key, op, self.set_values() if op in ("in", "notin") else self.exact_value())

    def set_values(self) -> frozenset[str]:
        tok, lit = self.take()
        if tok != "(":
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.peek()
        if tok == ")":
            self.take()
            return frozenset({""})
        if tok not in (IDENT, ","):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        values: set[str] = set()
        while True:
            tok, word = self.take()
            if tok == IDENT:
                values.add(word)
                nxt, nlit = self.peek()
                if nxt == ")":
                    break
                if nxt != ",":
                    raise SelectorError(f"found '{nlit}', expected: ',' or ')'")
            elif tok == ",":
                if not values:
                    values.add("")
                nxt, _ = self.peek()
                if nxt == ")":
                    values.add("")
                    break
                if nxt == ",":
                    values.add("")
            else:
                raise SelectorError(f"found '{word}', expected: ',', or identifier")
        if self.take()[0] != ")":
            raise SelectorError(f"found '{lit}', expected: ')'")
        return frozenset(values)

    def exact_value(self) -> frozenset[str]:
        if self.peek()[0] in (END, ","):
            return frozenset({""})
        tok, lit = self.take()
        if tok != IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        return frozenset({lit})


def parse(text: str) -> list[Requirement]:
    """The requirements of a selector; :class:`SelectorError` with the API server's message."""
    return _Parser(text).parse()


def matches(labels: Mapping[str, str] | None, text: str) -> bool:
    return all(r.matches(labels or {}) for r in parse(text))
