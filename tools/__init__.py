"""Developer tools run from the repository (``make screens``, ``make gpu-check``).

A package so that the tests import ``tools.browser`` by that name (pytest puts the repository on
the path) and no installed module called ``tools`` can stand in for it.
"""
