"""Normalize one frame to its signature text.

A function name is reduced to what stays the same from build to build:
``void Parser::parse<Token>(std::span<char const>, int) const [clone .cold]``
becomes ``Parser::parse<T>``. The steps follow Socorro's
``CSignatureTool.normalize_cpp_function`` (``socorro/signature/rules.py``):
drop cv/ref qualifiers, drop the return type, collapse template arguments to
``<T>``, drop the parameter list, normalize lambdas; plus what GCC does to
server binaries that Firefox's symbol files never show: clone suffixes
(``.constprop.0``, ``.isra.0``, ``.part.0``, ``.cold``, ``.lto_priv.0``) and
ABI tags (``[abi:cxx11]``), which change with optimization settings and
compiler versions, not with the code.

A frame without a function becomes ``module+0xOFFSET`` (module file name,
offset of the function's start when known, else of the pc: Breakpad's
``module!+0x…`` idea), or ``@0xPC`` without a module (Socorro's spelling).
"""

from __future__ import annotations

import re

from coreepi.model.report import Frame

__all__ = ["frame_text", "module_name", "normalize_function"]

_CLONE_BRACKET = re.compile(r"\s*\[clone [^\]]*\]")
_CLONE_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|lto_priv|localalias)(\.\d+)?)+$")
_ABI_TAG = re.compile(r"\[abi:[^\]]*\]")
_LAMBDA = re.compile(r"\{lambda\((?:[^(){}]|\([^(){}]*\))*\)#\d+\}")
_CLANG_LAMBDA = re.compile(r"::\$_\d+(?=::|$)")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_QUALIFIERS = (" const", " volatile", " &&", " &", " noexcept")
_SPACE_BEFORE = re.compile(r" (?=[*&,])")
_COMMA = re.compile(r",(?! )")
_OPERATOR_CHARS = set("<>=-!+*/%^&|~[]()")


def normalize_function(name: str, *, strip_templates: bool = True) -> str:
    """The signature text of a demangled function name (see module docstring)."""
    text = name.strip()
    text = _CLONE_BRACKET.sub("", text)
    text = _CLONE_SUFFIX.sub("", text)
    text = _ABI_TAG.sub("", text)
    text = _LAMBDA.sub("{lambda}", text)
    text = _CLANG_LAMBDA.sub("::$", text)
    text = text.replace("`anonymous namespace'", "(anonymous namespace)")
    changed = True
    while changed:  # "f() const &" has two qualifiers
        changed = False
        for q in _QUALIFIERS:
            if text.endswith(q):
                text, changed = text[: -len(q)].rstrip(), True
    text = _collapse(text, "(", ")", "", keep=_keep_paren)
    if strip_templates:
        text = _collapse(text, "<", ">", "<T>", keep=lambda t, i: False)
    text = _drop_return_type(text)
    text = _RUST_HASH.sub("", text)
    text = _SPACE_BEFORE.sub("", text)
    text = _COMMA.sub(", ", text)
    return text.strip()


def _keep_paren(text: str, i: int) -> bool:
    """Keep ``operator()``'s own name and ``(anonymous namespace)``; drop
    other groups (parameter lists)."""
    if text.startswith("(anonymous namespace)", i):
        return True
    return text.startswith("()", i) and text[:i].endswith("operator")


def _after_operator(text: str, i: int) -> bool:
    """Whether the angle bracket at ``i`` is part of an operator's name
    (operator<, operator<<, operator->), not a template argument list."""
    j = i
    while j > 0 and text[j - 1] in _OPERATOR_CHARS:
        j -= 1
    return text[:j].endswith("operator")


def _collapse(text: str, open_: str, close: str, replacement: str, keep) -> str:  # type: ignore[no-untyped-def]
    """Replace each outermost ``open_ … close`` group by ``replacement``,
    except groups ``keep(text, index)`` accepts and brackets inside an
    operator name. Unbalanced text is returned unchanged."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if depth == 0 and ch == open_ and _after_operator(text, i) and open_ != "(":
            out.append(ch)  # operator<, operator<<: not a template
        elif depth == 0 and ch == close and _after_operator(text, i):
            out.append(ch)
        elif ch == open_:
            if depth == 0 and keep(text, i):
                end = _matching(text, i, open_, close)
                if end < 0:
                    return text
                out.append(text[i : end + 1])
                i = end + 1
                continue
            if depth == 0:
                out.append(replacement)
            depth += 1
        elif ch == close and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    return text if depth else "".join(out)


def _matching(text: str, i: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _drop_return_type(text: str) -> str:
    """``void ns::f<T>`` -> ``ns::f<T>``; ``Foo::operator bool`` is kept whole."""
    tokens: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}" and depth:
            depth -= 1
        if ch == " " and depth == 0:
            if current:
                tokens.append(current)
            current = ""
        else:
            current += ch
    if current:
        tokens.append(current)
    if len(tokens) <= 1:
        return text
    for k in range(len(tokens) - 1, 0, -1):
        if tokens[k - 1].endswith("operator"):
            # conversion / new / delete operators: "operator new", "A::operator bool"
            start = k - 1
            while start > 0 and tokens[start - 1].endswith("operator"):
                start -= 1
            return " ".join(tokens[start:])
    return tokens[-1]


def module_name(path: str | None) -> str | None:
    """A module's file name: signatures must not depend on where it is installed."""
    if not path:
        return None
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def frame_text(frame: Frame, *, strip_templates: bool = True) -> str:
    """The signature text of one frame (see module docstring)."""
    if frame.function:
        return normalize_function(frame.function, strip_templates=strip_templates)
    module = module_name(frame.module)
    if module is not None and frame.module_offset is not None:
        offset = frame.module_offset
        if frame.function_offset is not None and frame.function_offset <= offset:
            offset -= frame.function_offset  # the function's start: stable within it
        return f"{module}+0x{offset:x}"
    if module is not None:
        return module
    return f"@0x{frame.pc:x}"
