"""Digests of source files that follow behaviour, not bytes: the unit of every fingerprint
(h3gates.core.fingerprints, docs/ladder.md "What a fingerprint covers").

- A Python file is digested by its syntax tree with docstrings dropped (comments and layout are not in
  the tree): a comment, a docstring or a reformatting reruns nothing; any changed token that reaches the
  tree (a name, a number, an operator, a string that is not a docstring) changes the digest. The tree is
  written out by `_py` below, field by field, leaving out empty fields, so that the same code gives the
  same digest under Python 3.11 and 3.12 (3.12's `ast.dump` adds empty `type_params`).
- A CUDA/C/C++ file is digested by its token stream without comments and whitespace. What whitespace
  still means there is kept: the end of a preprocessor directive (a token `#<newline>`) and whether a
  `#define`d name is followed at once by `(` (a function-like macro) or not.
- Any other file (package data: the rcp table, the schemas) by its bytes.

Standard library only (the Snakefile computes these for every rule's params).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from pathlib import Path

from h3gates.core.jobs import is_off

VERSION = "h3src1"  # bump when a normalization changes: every fingerprint changes once
C_SUFFIXES = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp")


def source_sha256(path) -> str:
    """The behaviour digest of one file (hex), cached per (path, mtime, size)."""
    p = Path(path)
    st = p.stat()
    return _cached(str(p), st.st_mtime_ns, st.st_size).hex()


@functools.lru_cache(maxsize=4096)
def _cached(path: str, mtime_ns: int, size: int) -> bytes:
    p = Path(path)
    if p.suffix != ".py" and p.suffix not in C_SUFFIXES:
        return hashlib.sha256(normalized(p)).digest()
    data = p.read_bytes()
    return memoized(b"py:" if p.suffix == ".py" else b"c:", data, lambda: hashlib.sha256(normalized(p, data)).digest())


# ------------------------------------------------------------------ the digests of sources seen before
# A digest is a pure function of the file's bytes, its kind, this module's code and Python's version (the
# parser): kept on disk under the SHA-256 of all four, so that each job (a Python start) parses only the
# sources it has not seen (a rung job restored from the run cache spends most of its time here otherwise).
# Content-addressed: an edit is a new entry, never a stale one. H3GATES_SOURCE_CACHE names the folder
# (`off`: none); else $XDG_CACHE_HOME/h3gates/sourcedigest (~/.cache/...).
def _memo_dir() -> Path | None:
    import os

    where = os.environ.get("H3GATES_SOURCE_CACHE")
    if is_off(where):
        return None
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "h3gates", "sourcedigest")


@functools.lru_cache(maxsize=1)
def _memo_salt() -> bytes:
    import sys

    return hashlib.sha256(
        Path(__file__).read_bytes() + f"{VERSION}:{sys.version_info[0]}.{sys.version_info[1]}".encode()
    ).digest()


def memoized(tag: bytes, data: bytes, compute) -> bytes:
    """`compute()` (bytes: a pure function of `data` and of what `tag` names), kept on disk by content. An
    entry is written atomically and framed with its own SHA-256: a torn or edited one is recomputed; a folder
    that cannot be written leaves the value uncached, never wrong."""
    d = _memo_dir()
    if d is None:
        return compute()
    key = hashlib.sha256(_memo_salt() + tag + b"\0" + data).hexdigest()
    memo = d / key[:2] / key
    try:
        got = memo.read_bytes()
        if len(got) >= 32 and hashlib.sha256(got[32:]).digest() == got[:32]:
            return got[32:]
    except OSError:
        pass
    value = compute()
    import os
    import tempfile

    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(value).digest() + value)
        os.replace(tmp, memo)
    except OSError:
        pass
    return value


def normalized(path: Path, data: bytes | None = None) -> bytes:
    """What a file's digest is taken over: its normal form, tagged with the kind and VERSION."""
    data = path.read_bytes() if data is None else data
    if path.suffix == ".py":
        try:
            return f"{VERSION}:py:".encode() + python_form(data.decode("utf-8"), str(path)).encode()
        except (SyntaxError, ValueError):  # a file that does not parse is its bytes: its import fails in the rung,
            return f"{VERSION}:py-unparsable:".encode() + data  # which reports the candidate's SyntaxError
    if path.suffix in C_SUFFIXES:
        return f"{VERSION}:c:".encode() + c_form(data.decode("utf-8", "surrogateescape")).encode(
            "utf-8", "surrogateescape"
        )
    return f"{VERSION}:bytes:".encode() + data


# ------------------------------------------------------------------ Python
_DOC_HOLDERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def python_form(text: str, filename: str = "<source>") -> str:
    """The syntax tree of `text` without docstrings, written out version-independently."""
    tree = ast.parse(text, filename)
    for node in ast.walk(tree):
        if isinstance(node, _DOC_HOLDERS) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:]
    return _py(tree)


def _py(v) -> str:
    if isinstance(v, ast.AST):
        fields = []
        for name in v._fields:
            x = getattr(v, name, None)
            if x is None or x == []:
                continue  # absent and empty fields: the same tree on every Python version
            fields.append(f"{name}={_py(x)}")
        return f"{type(v).__name__}({','.join(fields)})"
    if isinstance(v, list):
        return "[" + ",".join(_py(x) for x in v) + "]"
    return f"{type(v).__name__}:{v!r}"


# ------------------------------------------------------------------ CUDA / C / C++
_C_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\f\v]+)
  | (?P<nl>\r?\n)
  | (?P<cont>\\\r?\n)                              # a line continuation
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
  | (?P<char>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])+')
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.'])*)
  | (?P<ident>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<punct>>>=|<<=|\.\.\.|->\*|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|\#\#|[^\s])
    """,
    re.S | re.X,
)


def c_form(text: str) -> str:
    """The token stream of a C/C++/CUDA source without comments and whitespace, one token a line;
    a preprocessor directive ends with the token `#<nl>`, and a function-like macro's name is written
    with its `(` (`#define F(x)` and `#define F (x)` differ in meaning, so in digest)."""
    out: list[str] = []
    in_directive = False  # inside a preprocessor line
    line_start = True  # nothing but whitespace or comments yet on this line
    define_state = 0  # 1: saw `# define`, 2: saw the macro's name (the next token decides function-like)
    prev_ws = False
    pos = 0
    while pos < len(text):
        m = _C_TOKEN.match(text, pos)
        if m is None:  # (cannot happen: punct takes any non-space character)
            raise ValueError(f"cannot tokenize at offset {pos}")
        pos = m.end()
        kind = m.lastgroup
        tok = m.group()
        if kind in ("ws", "cont", "lcomment"):
            prev_ws = True
            continue
        if kind == "bcomment":
            prev_ws = True
            if "\n" in tok and in_directive:  # a block comment spanning lines ends nothing: keep the directive
                pass
            continue
        if kind == "nl":
            if in_directive:
                out.append("#<nl>")
                in_directive = False
            line_start, define_state, prev_ws = True, 0, True
            continue
        if line_start and tok == "#":
            in_directive = True
            define_state = -1  # the directive's name comes next
        elif define_state == -1:
            define_state = 1 if tok == "define" else 0
        elif define_state == 1 and kind == "ident":
            define_state = 2
        elif define_state == 2:
            if tok == "(" and not prev_ws:
                out[-1] = out[-1] + "("  # a function-like macro
                define_state, line_start, prev_ws = 0, False, False
                continue
            define_state = 0
        out.append(tok)
        line_start, prev_ws = False, False
    if in_directive:
        out.append("#<nl>")
    return "\n".join(out)
