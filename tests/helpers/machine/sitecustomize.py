"""Started with every Python process a test starts (tests/conftest.py puts this folder on PYTHONPATH): when
SQUARECHIPO_TEST_MACHINE_DIR is set, squarechipo.trust.machine.machine_dir names that folder in the process, so no
process a test starts reads or writes the account's own ~/.squarechipo (its registry of releases, its record store,
its signing key). Nothing of squarechipo reads that variable: only this test shim does."""

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

_FOLDER = os.environ.get("SQUARECHIPO_TEST_MACHINE_DIR")


class _MachineFolder(importlib.abc.MetaPathFinder):
    """Patches squarechipo.trust.machine when it is first imported, without importing anything before that."""

    def find_spec(self, name, path, target=None):
        if name != "squarechipo.trust.machine":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.machine_dir = lambda: Path(_FOLDER)

        spec.loader.exec_module = exec_module
        return spec


if _FOLDER:
    sys.meta_path.insert(0, _MachineFolder())
