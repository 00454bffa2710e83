"""cloudqueue's version, in one place: ``pyproject.toml`` reads it from here when the package is
built (setuptools' dynamic version), and ``cloudqueue --version`` prints it from here, without
importing ``importlib.metadata`` (which would cost the command as much again as click does)."""

__version__ = "0.1.0"
