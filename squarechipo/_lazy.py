"""Re-exports resolved on first use, so that importing a package (``import squarechipo.losses``) does not import
every module its ``__init__`` names (``datasets``, the release machinery, TRL)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) for ``package``, each public name written once: ``exports`` maps a
    module to the names it gives; each is imported from its module the first time it is read, then kept in the
    package's namespace (PEP 562)."""
    where = {name: module for module, names in exports.items() for name in names}
    if len(where) != sum(map(len, exports.values())):
        raise ValueError(f"{package}: a name is exported from two modules; export each name once")

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, sorted(where)
