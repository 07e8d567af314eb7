"""The package version, in a module of its own so ``checkpoint`` and the experiments runner need not import the whole
package. Keep it equal to ``version`` in pyproject.toml."""

__version__ = "0.1.0"
