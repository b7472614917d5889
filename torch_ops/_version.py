"""The package version. Its one source is ``version`` in pyproject.toml: read from the source tree
when this package sits in it (an editable install or a checkout on sys.path), else from the
installed distribution's metadata (which the build copied from pyproject.toml)."""
import importlib.metadata
import os
from typing import Optional

DISTRIBUTION = "cake-sparse-mla"
PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")


def source_tree_version(path: str = PYPROJECT) -> Optional[str]:
    """``project.version`` of the pyproject.toml at ``path`` if it describes this distribution."""
    try:
        import tomllib  # Python 3.11+
        with open(path, "rb") as file:
            project = tomllib.load(file).get("project", {})
    except (ImportError, OSError, ValueError):
        return None
    return project.get("version") if project.get("name") == DISTRIBUTION else None


def installed_version() -> Optional[str]:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


__version__ = source_tree_version() or installed_version() or "0+unknown"
