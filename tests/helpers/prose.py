"""The prose of Python files: their docstrings and comments, which the prose checks read as they read the pages."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The package's and the benchmarks' source files, relative to the checkout.
SOURCES = sorted(str(p.relative_to(ROOT)) for d in ("squarechipo", "benchmarks") for p in (ROOT / d).rglob("*.py"))


def source_prose(path: Path) -> str:
    """A Python file's docstrings and comments, one paragraph each."""
    source = path.read_text(encoding="utf-8")
    found = [
        ast.get_docstring(node) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    comments, block = [], []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            block.append(token.string.lstrip("#:").strip())
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) and block:
            comments.append(" ".join(block))
            block = []
    return "\n\n".join(found + comments)
