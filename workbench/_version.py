"""The package version, alone so ``checkpoint`` and the experiments runner need not import the package; keep it equal
to pyproject.toml's."""

__version__ = "0.1.0"
