"""The old address of ``workbench.experiments.results_table`` (the results page and compute accounting).

That module reads what recipes wrote, so it lives in ``experiments``, above ``analysis``; this name
stays so that ``import workbench.analysis.results`` and ``wb.analysis.results`` in notebooks keep
working, and it is the same module object there, not a copy (patching one patches the other).
``tests/test_layering.py`` places this alias in the experiments layer, with what it names.
"""

import sys

from ..experiments import results_table

sys.modules[__name__] = results_table
