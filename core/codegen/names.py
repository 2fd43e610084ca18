"""The one gate between model-supplied names and generated source.

A model's graph, node and tensor names are arbitrary strings: quotes,
newlines, ``*/``, ``\"\"\"`` or NUL bytes in them must never change the
meaning of an emitted file.  Generated code therefore uses names only as

* comments, through :func:`comment_text` (printable ASCII, no comment
  terminators, bounded length);
* string literals, through :func:`py_string` / :func:`c_string` (escaped);
* identifiers, through :func:`identifier` (generated from a prefix and an
  index; the model's name appears at most as a sanitized suffix).

Every backend's emitter uses these functions; none formats a model name
into source by itself.
"""

from __future__ import annotations

import re

__all__ = ["comment_text", "py_string", "c_string", "identifier", "MAX_COMMENT"]

#: Longest comment text kept from one name (the rest is elided with "...").
MAX_COMMENT = 80

_UNSAFE_COMMENT = re.compile(r"[^A-Za-z0-9 _.,:;=+\-()\[\]<>#@%^&|~!?$']")
_IDENT_TAIL = re.compile(r"[^A-Za-z0-9_]")


def comment_text(name: object, limit: int = MAX_COMMENT) -> str:
    """``name`` reduced to text that is safe inside any line or block comment.

    Keeps letters, digits and harmless punctuation; every other character
    (quotes, backslashes, ``/`` and ``*`` which could close a C comment,
    newlines, non-ASCII) becomes ``?``.  The result is one line.
    """
    text = _UNSAFE_COMMENT.sub("?", str(name))
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text


def py_string(name: object) -> str:
    """A Python string literal (with quotes) whose value is ``str(name)``.

    ``repr`` of a ``str`` is always a valid single-line literal; it is
    never placed inside another literal or docstring.
    """
    return repr(str(name))


def c_string(name: object) -> str:
    """A C string literal (with quotes) whose bytes are ``name`` in UTF-8.

    Every byte outside printable ASCII, and ``"``, ``\\`` and ``?`` (trigraphs),
    is written as a three-digit octal escape.
    """
    out = []
    for b in str(name).encode("utf-8"):
        ch = chr(b)
        if 32 <= b < 127 and ch not in '"\\?':
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def identifier(prefix: str, index: int, hint: object = "") -> str:
    """A generated identifier ``<prefix><index>[_<hint>]``.

    ``prefix`` must already be an identifier chosen by the code generator;
    ``hint`` (a model name, say) is reduced to ``[A-Za-z0-9_]`` and 24
    characters, so it can make generated code easier to read but can never
    make it invalid or collide (the index keeps identifiers distinct).
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix):
        raise ValueError(f"identifier prefix {prefix!r} is not an identifier")
    tail = _IDENT_TAIL.sub("_", str(hint))[:24].strip("_")
    return f"{prefix}{int(index)}_{tail}" if tail else f"{prefix}{int(index)}"
