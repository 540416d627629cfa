"""Attribute-test XPath expressions compiled to Python, for trafilatura's boilerplate lists.

trafilatura removes boilerplate with long XPath predicates such as ``.//*[(self::div or ...)][
contains(@id, "footer") or ... 80 more tests]``. libxml2 evaluates each test as a string function on
every element: on real pages these expressions took 44 % of trafilatura's time. The same question in
Python is a tag filter done by lxml in C (``iterdescendants(*tags)``), then one verdict per distinct
tuple of the attribute values read (memoised: class and id strings recur all over a page), so the
compiled form returns the same elements, in the same (document) order, several times faster.

Only a subset is compiled: location paths ``.//*`` or ``.//NAME``, optionally ending in ``[N]`` (the
N-th match among the children of each parent) or wrapped as ``(PATH)[N]`` (the N-th match in
document order), joined by ``|``; predicates made of ``or``, ``and``, ``not()``, parentheses,
``self::NAME``, ``@NAME`` (presence), ``@NAME = 'literal'`` / ``!=``, ``contains()`` and
``starts-with()`` of ``@NAME`` or of ``translate(@NAME, 'FROM', 'TO')``. Anything else raises
``Unsupported``; callers keep libxml2's expression then. XPath's rules are kept: a missing attribute
is the empty string for the string functions and compares unequal to everything. Called on an element
(trafilatura's case); a whole document (``ElementTree``), whose context node differs, and a call with
XPath variables are handed to libxml2.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from lxml import etree

_TOKEN = re.compile(
    r"""\s*(?:(?P<literal>"[^"]*"|'[^']*')|(?P<number>\d+)|(?P<op>\.//|::|!=|[\[\]()|,=@])"""
    r"""|(?P<name>\*|[A-Za-z_][\w.\-]*))"""
)
_STRING_FUNCTIONS = ("contains", "starts-with")
MEMO_LIMIT = 1 << 16  # distinct (tag, attribute values) tuples kept per expression


class Unsupported(ValueError):
    """The expression is outside the compiled subset."""


@dataclass(frozen=True)
class CompiledPath:
    """One ``.//NAME[predicate]...`` step: the tags lxml filters (``None``: every element), the test,
    ``nth_child`` (``[N]`` on the step: the N-th match among one parent's children) and ``nth``
    (``(PATH)[N]``: the N-th match of the whole path)."""

    tags: tuple[str, ...] | None
    test: Callable[[etree._Element], bool] | None
    nth_child: int | None = None
    nth: int | None = None

    @property
    def positional(self) -> bool:
        return self.nth_child is not None or self.nth is not None

    def selects(self, element: etree._Element) -> bool:
        """The path's test on one element, positions aside."""
        return (self.tags is None or element.tag in self.tags) and (self.test is None or self.test(element))

    def matches(self, node: etree._Element) -> Iterator[etree._Element]:
        """The elements under ``node`` the path selects, in document order."""
        found = node.iterdescendants(*self.tags) if self.tags else node.iterdescendants(etree.Element)
        if self.test is not None:
            found = filter(self.test, found)
        if self.nth_child is not None:
            found = _nth_child(found, self.nth_child)
        if self.nth is not None:
            found = islice(found, self.nth - 1, self.nth)
        return found


def _nth_child(found: Iterable[etree._Element], n: int) -> Iterator[etree._Element]:
    """The matches that are the n-th match among their parent's children (XPath's ``child::*[...][n]``)."""
    seen: dict[etree._Element, int] = {}  # lxml hands out one proxy per node while it is referenced
    for element in found:
        parent = element.getparent()
        seen[parent] = seen.get(parent, 0) + 1
        if seen[parent] == n:
            yield element


def _document_position(element: etree._Element) -> tuple[int, ...]:
    """Child indexes from the root down: sorts elements in document order (an ancestor first)."""
    path = []
    parent = element.getparent()
    while parent is not None:
        path.append(parent.index(element))
        element, parent = parent, parent.getparent()
    return tuple(reversed(path))


class CompiledXPath:
    """Callable like ``lxml.etree.XPath`` on an element: the matching elements in document order."""

    def __init__(self, path: str, paths: list[CompiledPath]):
        self.path = path
        self._paths = paths
        self._libxml2: etree.XPath | None = None

    def __call__(self, node, **variables) -> list[etree._Element]:
        if variables or isinstance(node, etree._ElementTree):  # XPath variables, a whole document: libxml2's
            if self._libxml2 is None:
                self._libxml2 = etree.XPath(self.path)
            return self._libxml2(node, **variables)
        if len(self._paths) == 1:
            return list(self._paths[0].matches(node))
        if any(path.positional for path in self._paths):
            found = {element: None for path in self._paths for element in path.matches(node)}
            return sorted(found, key=_document_position)
        tags = [tag for path in self._paths for tag in (path.tags or ())]
        candidates = node.iterdescendants(*tags) if all(path.tags for path in self._paths) else \
            node.iterdescendants(etree.Element)  # with every path naming its tags, lxml filters them in C
        return [element for element in candidates if any(path.selects(element) for path in self._paths)]

    def __repr__(self) -> str:
        return f"CompiledXPath({self.path!r})"


def compile_xpath(expression: str) -> CompiledXPath:
    """``expression`` as a ``CompiledXPath``; ``Unsupported`` outside the subset."""
    parser = _Parser(expression)
    paths = [parser.step()]
    while parser.accept("|"):
        paths.append(parser.step())
    parser.expect_end()
    return CompiledXPath(expression, paths)


class _Parser:
    """Recursive descent over the subset; predicates become the source of one Python function."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = self._tokenize(text)
        self.at = 0

    @staticmethod
    def _tokenize(text: str) -> list[tuple[str, str]]:
        tokens, pos, end = [], 0, len(text.rstrip())
        while pos < end:
            match = _TOKEN.match(text, pos)
            if match is None:
                raise Unsupported(f"cannot read {text[pos:pos + 20]!r}")
            kind = match.lastgroup
            tokens.append((kind, match.group(kind)))
            pos = match.end()
        return tokens

    def peek(self, value: str | None = None, kind: str | None = None) -> bool:
        if self.at >= len(self.tokens):
            return False
        token_kind, token = self.tokens[self.at]
        return (value is None or token == value) and (kind is None or token_kind == kind)

    def accept(self, value: str) -> bool:
        if self.peek(value) and self.tokens[self.at][0] != "literal":
            self.at += 1
            return True
        return False

    def expect(self, value: str) -> None:
        if not self.accept(value):
            raise Unsupported(f"expected {value!r} at token {self.at} of {self.text!r}")

    def take(self, kind: str) -> str:
        if not self.peek(kind=kind):
            raise Unsupported(f"expected a {kind} at token {self.at} of {self.text!r}")
        self.at += 1
        return self.tokens[self.at - 1][1]

    def expect_end(self) -> None:
        if self.at != len(self.tokens):
            raise Unsupported(f"unexpected {self.tokens[self.at][1]!r} in {self.text!r}")

    def step(self) -> CompiledPath:
        """``PATH`` or ``(PATH)[N]``."""
        if not self.accept("("):
            return self.path()
        path = self.path()
        self.expect(")")
        self.expect("[")
        nth = self.position()
        self.expect("]")
        return CompiledPath(path.tags, path.test, path.nth_child, nth)

    def position(self) -> int:
        number = int(self.take("number"))
        if number < 1:
            raise Unsupported("position below 1")
        return number

    def path(self) -> CompiledPath:
        """``.//NAME`` with predicates, the last of which may be a position ``[N]``."""
        self.expect(".//")
        name = self.take("name")
        tags = None if name == "*" else (name,)
        conditions, nth_child = [], None
        while nth_child is None and self.accept("["):
            if self.peek(kind="number"):
                nth_child = self.position()
            elif self.peek(kind="literal"):
                raise Unsupported("a literal as a predicate")
            else:
                conditions.append(self.or_expr())
            self.expect("]")
        if tags is None and conditions and (only := _only_tags(conditions[0])) is not None:
            tags, conditions = only, conditions[1:]  # a leading [self::a or self::b]: lxml filters the tags
        return CompiledPath(tags, _function(conditions) if conditions else None, nth_child)

    def or_expr(self) -> _Expr:
        terms = [self.and_expr()]
        while self.accept("or"):
            terms.append(self.and_expr())
        return terms[0] if len(terms) == 1 else _Expr("or", terms)

    def and_expr(self) -> _Expr:
        terms = [self.unary()]
        while self.accept("and"):
            terms.append(self.unary())
        return terms[0] if len(terms) == 1 else _Expr("and", terms)

    def unary(self) -> _Expr:
        if self.peek("not") and self.tokens[self.at + 1 : self.at + 2] == [("op", "(")]:
            self.at += 2
            inner = self.or_expr()
            self.expect(")")
            return _Expr("not", [inner])
        if self.accept("("):
            inner = self.or_expr()
            self.expect(")")
            return inner
        if self.accept("self"):
            self.expect("::")
            return _Expr("self", self.element_name())
        if self.peek(kind="name") and self.tokens[self.at][1] in _STRING_FUNCTIONS:
            function = self.take("name")
            self.expect("(")
            value = self.string_value()
            self.expect(",")
            literal = _literal(self.take("literal"))
            self.expect(")")
            return _Expr(function, (value, literal))
        if self.accept("@"):
            attribute = self.element_name()
            for op in ("=", "!="):
                if self.accept(op):
                    return _Expr(op, (attribute, _literal(self.take("literal"))))
            return _Expr("has", attribute)
        raise Unsupported(f"unsupported term at token {self.at} of {self.text!r}")

    def element_name(self) -> str:
        """An element or attribute name; the wildcard ``*`` is outside the subset here."""
        name = self.take("name")
        if name == "*":
            raise Unsupported(f"a wildcard test in {self.text!r}")
        return name

    def string_value(self) -> _Value:
        if self.accept("@"):
            return _Value(self.element_name(), None)
        if self.accept("translate"):
            self.expect("(")
            inner = self.string_value()
            if inner.table is not None:
                raise Unsupported("nested translate()")
            self.expect(",")
            source = _literal(self.take("literal"))
            self.expect(",")
            target = _literal(self.take("literal"))
            self.expect(")")
            return _Value(inner.attribute, _translation(source, target))
        raise Unsupported(f"unsupported string argument in {self.text!r}")


@dataclass(frozen=True)
class _Value:
    """``@attribute``, optionally through ``translate()`` (a ``str.translate`` table)."""

    attribute: str
    table: dict[int, int | None] | None


@dataclass(frozen=True)
class _Expr:
    kind: str  # or, and, not, self, has, =, !=, contains, starts-with
    args: object


def _literal(token: str) -> str:
    return token[1:-1]


def _translation(source: str, target: str) -> dict[int, int | None]:
    """XPath ``translate``: the first occurrence of a character in ``source`` decides; characters past
    the end of ``target`` are removed."""
    table: dict[int, int | None] = {}
    for i, char in enumerate(source):
        table.setdefault(ord(char), ord(target[i]) if i < len(target) else None)
    return table


def _only_tags(expr: _Expr) -> tuple[str, ...] | None:
    """The names of a predicate made only of ``self::NAME`` joined by ``or``; else ``None``."""
    if expr.kind == "self":
        return (expr.args,)
    if expr.kind == "or" and all(term.kind == "self" for term in expr.args):
        return tuple(term.args for term in expr.args)
    return None


def _function(conditions: Iterable[_Expr]) -> Callable[[etree._Element], bool]:
    """One Python test of every condition, memoised on the values it reads.

    The predicate is a function of the element's tag and a few attributes; the same class and id
    strings recur all over a page and across pages, so the verdict is kept per distinct tuple of
    them (a bounded dict) and the substring tests run once per tuple, not once per element."""
    attributes: dict[str, str] = {}  # attribute -> parameter holding ``element.get(attribute)``
    strings: dict[tuple, str] = {}  # (attribute, translate table) -> variable holding its string value
    derived: list[str] = []
    constants: dict[str, object] = {}

    def variable(attribute: str) -> str:
        return attributes.setdefault(attribute, f"a{len(attributes)}")

    def constant(value: object) -> str:
        name = f"c{len(constants)}"
        constants[name] = value
        return name

    def string(value: _Value) -> str:
        key = (value.attribute, None if value.table is None else tuple(sorted(value.table.items())))
        if key not in strings:
            strings[key] = f"s{len(strings)}"
            text = f"({variable(value.attribute)} or '')"
            if value.table is not None:
                text = f"{text}.translate({constant(value.table)})"
            derived.append(f"{strings[key]} = {text}")
        return strings[key]

    def source(expr: _Expr) -> str:
        if expr.kind in ("or", "and"):
            return "(" + f" {expr.kind} ".join(source(term) for term in expr.args) + ")"
        if expr.kind == "not":
            return f"(not {source(expr.args[0])})"
        if expr.kind == "self":
            return f"(tag == {constant(expr.args)})"
        if expr.kind == "has":
            return f"({variable(expr.args)} is not None)"
        if expr.kind in ("=", "!="):
            attribute, literal = expr.args
            name = variable(attribute)
            return f"({name} is not None and {name} {'==' if expr.kind == '=' else '!='} {constant(literal)})"
        value, literal = expr.args
        text = string(value)
        if expr.kind == "contains":
            return f"({constant(literal)} in {text})"
        return f"{text}.startswith({constant(literal)})"

    body = " and ".join(source(condition) for condition in conditions)
    parameters = ["tag", *attributes.values()]
    reads = ["element.tag", *(f"get({attribute!r})" for attribute in attributes)]
    code = (
        f"def evaluate({', '.join(parameters)}):\n"
        + "".join(f"    {line}\n" for line in derived)
        + f"    return bool({body})\n"
        "def test(element):\n"
        "    get = element.get\n"
        f"    key = ({', '.join(reads)},)\n"
        "    found = memo.get(key)\n"
        "    if found is None:\n"
        "        if len(memo) >= MEMO_LIMIT:\n"
        "            memo.clear()\n"
        "        found = memo[key] = evaluate(*key)\n"
        "    return found\n"
    )
    namespace: dict[str, object] = {**constants, "memo": {}, "MEMO_LIMIT": MEMO_LIMIT}
    exec(compile(code, "<compiled xpath>", "exec"), namespace)  # noqa: S102 - source built above from parsed tokens
    return namespace["test"]


def compile_or_keep(expression) -> Callable:
    """``expression`` (an ``lxml.etree.XPath``) compiled when inside the subset, else itself."""
    try:
        return compile_xpath(expression.path)
    except Unsupported:
        return expression
