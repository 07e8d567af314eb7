"""The live loss curve of a training run in a notebook.

It lives with the widgets, not in the trainer: ``train`` only hands each history row to a callback,
and drawing that row into a notebook cell is the notebook's business (IPython, matplotlib), which a
run on a server or under ``torchrun`` never needs.
"""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd

from ..plots import loss_curves
from ..validation import check_int


def in_notebook() -> bool:
    """Whether a notebook kernel shows what ``display`` sends: in a terminal (python or IPython) ``display``
    prints a figure's repr, ``Figure(650x420)``, into the progress bar instead."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


class LiveLossPlot:
    """A ``train`` callback that redraws the loss curve in a notebook cell as history rows arrive.

    ``wb.train(cfg, callback=LiveLossPlot())``: one output cell, updated in place every ``every`` rows.
    Outside a notebook it draws nothing (one warning says so): a figure file is ``plots.LossFigure``'s job.
    """

    def __init__(self, every: int = 1, title: str = "") -> None:
        check_int("every", every, 1)  # checked here, not as a ZeroDivisionError in the middle of training
        self.every, self.title, self.rows, self._handle, self._warned = every, title, [], None, False

    def __call__(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) % self.every == 0:
            self._show(pd.DataFrame(self.rows))

    def on_train_end(self, history: pd.DataFrame) -> None:
        """The rows logged since the last redraw are shown too: the cell ends on the whole run."""
        if len(self.rows) % self.every:
            self._show(history)

    def _show(self, history: pd.DataFrame) -> None:
        if not in_notebook():
            if not self._warned:
                warnings.warn("LiveLossPlot draws only in a notebook; here it draws nothing (a figure file: "
                              "callback=plots.LossFigure(path))", stacklevel=2)
                self._warned = True
            return
        from IPython.display import display  # looked up per call, so a test can stand in for the notebook

        fig = loss_curves(history, title=self.title)
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
