"""Azure Table ``$filter`` syntax: tokenizer, recursive-descent parser, AST and printer.

The grammar is Azure's (see the REST reference, section 5.1)::

    or         := and ("or" and)*
    and        := unary ("and" unary)*
    unary      := "not" unary | "(" or ")" | "true" | "false" | comparison
    comparison := operand ("eq"|"ne"|"gt"|"ge"|"lt"|"le") operand   -- one property, one literal

Keywords and operators are accepted in any case (as Azurite does). A bare ``true``/``false`` is a
term of its own (``(true and RowKey eq '1') or …``, what .NET's PredicateBuilder sends; Azure
evaluates it). A bare property (``isActive``, ``not isActive``) is not a boolean expression: Azure
answers 400, and so do we. The AST is a handful of frozen dataclasses; a comparison is always
normalised to ``property op literal``. :mod:`rangetable.filter` compiles it into a predicate (and
re-exports these names: it is the public place of the ``$filter`` API).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from rangetable.edm import (
    BINARY,
    BOOLEAN,
    DATETIME,
    DOUBLE,
    GUID,
    INT32,
    INT32_MAX,
    INT32_MIN,
    INT64,
    INT64_MAX,
    INT64_MIN,
    STRING,
    iso_to_ticks,
    ticks_to_iso,
)
from rangetable.errors import TableError

# Azure documents "a maximum of 15 discrete comparisons" but serves far more: Orleans' grain directory
# sends 201 in production. This bound only keeps one filter's parse and plan work small (the 64 KiB
# request head limits a filter before it in most cases).
MAX_COMPARISONS = 4000
MAX_CONSTANTS = 15  # bare true/false terms, bounded apart (they keep the AST, and its recursion, small)
MAX_DEPTH = 100  # nesting of "(" and "not"; keeps recursion far from Python's limit

# --- AST ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compare:
    """``prop op value``; ``code`` is the EDM type code of the literal ``value``."""

    op: str
    prop: str
    code: int
    value: Any


@dataclass(frozen=True, slots=True)
class And:
    """Both sides hold."""

    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or:
    """Either side holds."""

    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Not:
    """The sub-expression does not hold."""

    expr: Node


@dataclass(frozen=True, slots=True)
class Const:
    """A bare ``true`` or ``false``."""

    value: bool


Node = Compare | And | Or | Not | Const

OPERATORS = ("eq", "ne", "gt", "ge", "lt", "le")
FLIP = {"eq": "eq", "ne": "ne", "gt": "lt", "ge": "le", "lt": "gt", "le": "ge"}
_ARITHMETIC = frozenset(("add", "sub", "mul", "div", "mod"))
_KEYWORDS = frozenset(("and", "or", "not", "true", "false", "null", *OPERATORS, *_ARITHMETIC))


# --- tokenizer ---------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""
     (?P<ws>\s+)
    |(?P<typed>(?i:datetime|guid|binary|x))'(?P<tbody>[^']*)'
    |'(?P<str>(?:[^']|'')*+)'
    |(?P<unterm>(?i:datetime|guid|binary|x)?')
    |(?P<num>-?[0-9]+(?P<frac>\.[0-9]+)?(?P<exp>[eE][+-]?[0-9]+)?)(?P<suffix>\w*)
    |(?P<name>[^\W\d]\w*)
    |(?P<lp>\()
    |(?P<rp>\))
    """,
    re.VERBOSE,
)
_GUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")

# A token is (kind, value, position). Kinds: "lit" (value = (code, v)), "name", "op", "and", "or",
# "not", "null", "arith", "(", ")", "end".
Token = tuple[str, Any, int]


def _invalid(what: str, pos: int) -> TableError:
    return TableError("InvalidInput", f"{what} at position {pos}")


def _typed_literal(prefix: str, body: str, pos: int) -> tuple[int, Any]:
    kind = prefix.lower()
    if kind == "datetime":
        try:
            if body != body.strip():
                raise ValueError(body)
            return DATETIME, iso_to_ticks(body)
        except ValueError:
            raise _invalid(f"Unrecognized 'Edm.DateTime' literal {prefix}'{body}'", pos) from None
    if kind == "guid":
        if not _GUID_RE.fullmatch(body):
            raise _invalid(f"Unrecognized 'Edm.Guid' literal {prefix}'{body}'", pos)
        return GUID, body.lower()
    if not _HEX_RE.fullmatch(body):
        raise _invalid(f"Unrecognized 'Edm.Binary' literal {prefix}'{body}'", pos)
    return BINARY, bytes.fromhex(body)


def _number_literal(m: re.Match, pos: int) -> tuple[int, Any]:
    text, suffix = m.group("num"), m.group("suffix")
    is_integer = m.group("frac") is None and m.group("exp") is None
    if not suffix:
        if is_integer:
            v = int(text)
            if not INT32_MIN <= v <= INT32_MAX:
                raise _invalid(f"Unrecognized 'Edm.Int32' literal '{text}'", pos)
            return INT32, v
        f = float(text)
        if not math.isfinite(f):
            raise _invalid(f"Unrecognized 'Edm.Double' literal '{text}'", pos)
        return DOUBLE, f
    if suffix in ("L", "l") and is_integer:
        v = int(text)
        if not INT64_MIN <= v <= INT64_MAX:
            raise _invalid(f"Unrecognized 'Edm.Int64' literal '{text}{suffix}'", pos)
        return INT64, v
    raise _invalid(f"Unrecognized numeric literal '{text}{suffix}'", pos)


def tokenize(text: str) -> list[Token]:
    """Split a filter into tokens; raises InvalidInput on a character or literal it cannot read."""
    tokens: list[Token] = []
    append = tokens.append
    pos, n = 0, len(text)
    match = _TOKEN_RE.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            raise _invalid(f"Unexpected character {text[pos]!r}", pos)
        kind = m.lastgroup
        if kind == "name":
            word = m.group("name")
            low = word.lower()
            if low in _KEYWORDS:
                if low in OPERATORS:
                    append(("op", low, pos))
                elif low == "true" or low == "false":
                    append(("lit", (BOOLEAN, low == "true"), pos))
                elif low in _ARITHMETIC:
                    append(("arith", low, pos))
                else:
                    append((low, low, pos))
            else:
                end = m.end()
                while end < n and text[end].isspace():
                    end += 1
                if end < n and text[end] == "(":
                    raise TableError("NotImplemented", f"Function '{word}' is not supported at position {pos}")
                append(("name", word, pos))
        elif kind == "str":
            append(("lit", (STRING, m.group("str").replace("''", "'")), pos))
        elif kind in ("num", "frac", "exp", "suffix"):
            append(("lit", _number_literal(m, pos), pos))
        elif kind == "tbody":
            append(("lit", _typed_literal(m.group("typed"), m.group("tbody"), pos), pos))
        elif kind == "lp":
            append(("(", "(", pos))
        elif kind == "rp":
            append((")", ")", pos))
        elif kind == "unterm":
            raise _invalid("Unterminated string literal", pos)
        pos = m.end()
    append(("end", None, n))
    return tokens


# --- parser ------------------------------------------------------------------------------------


class _Parser:
    __slots__ = ("tokens", "i", "comparisons", "constants", "depth")

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.comparisons = 0
        self.constants = 0
        self.depth = 0

    def parse(self) -> Node:
        node = self.or_()
        kind, value, pos = self.tokens[self.i]
        if kind != "end":
            raise _invalid(f"Unexpected {_show(kind, value)}", pos)
        return node

    def or_(self) -> Node:
        terms = [self.and_()]
        while self.tokens[self.i][0] == "or":
            self.i += 1
            terms.append(self.and_())
        return chain(Or, terms)

    def and_(self) -> Node:
        terms = [self.unary()]
        while self.tokens[self.i][0] == "and":
            self.i += 1
            terms.append(self.unary())
        return chain(And, terms)

    def unary(self) -> Node:
        kind, _, pos = self.tokens[self.i]
        if kind == "not" or kind == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _invalid("Filter nested too deeply", pos)
            self.i += 1
            if kind == "not":
                node: Node = Not(self.unary())
            else:
                node = self.or_()
                k, v, p = self.tokens[self.i]
                if k != ")":
                    raise _invalid(f"Expected ')' but found {_show(k, v)}", p)
                self.i += 1
            self.depth -= 1
            return node
        return self.comparison()

    def operand(self) -> Token:
        tok = self.tokens[self.i]
        kind, value, pos = tok
        # (a name followed by "(" was already rejected by the tokenizer as a function call)
        if kind == "null":
            raise _invalid("null literals are not supported", pos)
        if kind != "lit" and kind != "name":
            raise _invalid(f"Expected a property name or literal but found {_show(kind, value)}", pos)
        self.i += 1
        return tok

    def comparison(self) -> Node:
        start = self.tokens[self.i][2]
        left = self.operand()
        kind, op, pos = self.tokens[self.i]
        if kind != "op":
            ends_term = kind in ("end", ")", "and", "or")
            if ends_term and left[0] == "lit" and left[1][0] == BOOLEAN:
                self.constants += 1
                if self.constants > MAX_CONSTANTS:
                    raise _invalid(f"More than {MAX_CONSTANTS} true/false terms in the filter", start)
                return Const(left[1][1])
            if ends_term and left[0] == "name":
                raise _invalid(f"Property '{left[1]}' alone is not a condition (write '{left[1]} eq true')", start)
            if kind == "arith":
                raise _invalid(f"Arithmetic operator '{op}' is not supported", pos)
            raise _invalid(f"Expected a comparison operator but found {_show(kind, op)}", pos)
        self.i += 1
        right = self.operand()
        if left[0] == "name" and right[0] == "name":
            raise _invalid("Comparing two properties is not supported", start)
        if left[0] == "lit" and right[0] == "lit":
            raise _invalid("A comparison needs a property on one side", start)
        if left[0] == "lit":
            left, right, op = right, left, FLIP[op]
        self.comparisons += 1
        if self.comparisons > MAX_COMPARISONS:
            raise _invalid(f"More than {MAX_COMPARISONS} comparisons in the filter", start)
        code, value = right[1]
        return Compare(op, left[1], code, value)


def chain(kind: type[And] | type[Or], terms: list[Node]) -> Node:
    """``t1 op t2 op … tn`` as a balanced tree (the left half one longer: three terms give
    ``op(op(t1, t2), t3)``), so that a filter of thousands of terms stays a few levels deep for
    everything that walks it, and for the predicate compiled from it."""
    if len(terms) == 1:
        return terms[0]
    mid = (len(terms) + 1) // 2
    return kind(chain(kind, terms[:mid]), chain(kind, terms[mid:]))


def chain_terms(node: Node) -> list[Node]:
    """The terms of the ``and``/``or`` chain rooted at ``node`` (of its own kind), left to right;
    ``[node]`` for anything else."""
    if not isinstance(node, And | Or):
        return [node]
    kind = type(node)
    out: list[Node] = []
    todo: list[Node] = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, And | Or) and type(n) is kind:
            todo.append(n.right)
            todo.append(n.left)
        else:
            out.append(n)
    return out


def _show(kind: str, value: Any) -> str:
    if kind == "end":
        return "end of filter"
    if kind == "lit":
        return f"literal {format_literal(*value)}"
    return repr(value)


def parse_filter(text: str) -> Node:
    """Parse a ``$filter`` string into an AST; raises TableError (InvalidInput / NotImplemented)."""
    if not text or text.isspace():
        raise _invalid("Empty filter", 0)
    return _Parser(tokenize(text)).parse()


# --- printing ----------------------------------------------------------------------------------


def format_literal(code: int, value: Any) -> str:
    """A literal in filter syntax (the inverse of the tokenizer)."""
    if code == STRING:
        return "'" + value.replace("'", "''") + "'"
    if code == INT32:
        return str(value)
    if code == INT64:
        return f"{value}L"
    if code == DOUBLE:
        return repr(float(value))
    if code == BOOLEAN:
        return "true" if value else "false"
    if code == DATETIME:
        return f"datetime'{ticks_to_iso(value)}'"
    if code == GUID:
        return f"guid'{value}'"
    if code == BINARY:
        return f"X'{bytes(value).hex()}'"
    raise ValueError(f"unknown type code {code}")


def _level(node: Node) -> int:
    return 1 if isinstance(node, Or) else 2 if isinstance(node, And) else 3


def _describe(node: Node, min_level: int) -> str:
    if isinstance(node, Const):
        return "true" if node.value else "false"
    if isinstance(node, Compare):
        return f"{node.prop} {node.op} {format_literal(node.code, node.value)}"
    if isinstance(node, Not):
        return f"not ({_describe(node.expr, 0)})"
    level = _level(node)
    terms = chain_terms(node)
    if chain(type(node), terms) != node:  # not the shape a parse gives: the two sides as single terms
        terms = [node.left, node.right]
    s = f" {'and' if level == 2 else 'or'} ".join(_describe(t, level + 1) for t in terms)
    return f"({s})" if level < min_level else s


def describe(node: Node | None) -> str:
    """The AST as a canonical filter string; ``parse_filter(describe(n)) == n``. None gives ''."""
    return "" if node is None else _describe(node, 0)


# --- walking the AST -------------------------------------------------------------------------


def key_point(node: Node) -> tuple[str, str] | None:
    """``(pk, rk)`` when ``node`` is ``PartitionKey eq 'pk' and RowKey eq 'rk'`` (either order), else None."""
    if not (isinstance(node, And) and isinstance(node.left, Compare) and isinstance(node.right, Compare)):
        return None
    a, b = (node.left, node.right) if node.left.prop == "PartitionKey" else (node.right, node.left)
    if a.prop == "PartitionKey" and b.prop == "RowKey" and a.op == "eq" == b.op and a.code == STRING == b.code:
        return a.value, b.value
    return None


def properties_used(node: Node | None) -> frozenset[str]:
    """The property names a filter compares, PartitionKey, RowKey and Timestamp included."""
    if node is None or isinstance(node, Const):
        return frozenset()
    if isinstance(node, Compare):
        return frozenset((node.prop,))
    if isinstance(node, Not):
        return properties_used(node.expr)
    return properties_used(node.left) | properties_used(node.right)


def count_comparisons(node: Node | None) -> int:
    """The number of Compare nodes in an AST."""
    if node is None or isinstance(node, Const):
        return 0
    if isinstance(node, Compare):
        return 1
    if isinstance(node, Not):
        return count_comparisons(node.expr)
    return count_comparisons(node.left) + count_comparisons(node.right)
