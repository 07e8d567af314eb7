"""ipywidgets front-ends: every one is an ``Explorer`` whose render is a plain package function.

``core``: the Explorer and the analysis explorers (contraction, probes, token stepper). The other
modules hold the front-ends of the notebooks' own topics; each is re-exported here.
"""

from .core import Explorer, contraction_explorer, probe_explorer, token_stepper

__all__ = ["Explorer", "contraction_explorer", "probe_explorer", "token_stepper"]
