"""The package version, in a module of its own.

``checkpoint`` stamps it into every checkpoint and the experiments runner compares it with a stored
run's; importing it from the package ``__init__`` instead would make those low layers import the
whole package they sit under. Keep it equal to ``version`` in pyproject.toml.
"""

__version__ = "0.1.0"
