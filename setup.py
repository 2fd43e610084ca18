"""Package discovery for the folder layout: ``core/`` is ``rammer`` and
``backends/`` is ``rammer.backends``.  Everything else is in pyproject.toml.

setuptools' own discovery cannot rename folders, so the package list is
derived here from every folder under core/ and backends/ with an __init__.py.
"""

from __future__ import annotations

import os

from setuptools import setup

ROOTS = {"rammer": "core", "rammer.backends": "backends"}


def packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
            if "__init__.py" in filenames:
                rel = os.path.relpath(dirpath, folder)
                found.append(name if rel == "." else f"{name}.{rel.replace(os.sep, '.')}")
    return sorted(set(found))


setup(packages=packages(), package_dir=ROOTS)
