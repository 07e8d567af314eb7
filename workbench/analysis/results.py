"""Retired: the results page and compute accounting live in ``workbench.experiments.results_table``.

They read what recipes wrote, so they belong above ``analysis``; an alias here kept a second, upward
address alive (issue 32: no upward aliases). Importing this name fails with the new address.
"""

raise ImportError("workbench.analysis.results was retired: import workbench.experiments.results_table "
                  "(the same functions: summary_table, recipe_tables, run_compute, ...)")
