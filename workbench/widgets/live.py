"""The live loss curve of a training run in a notebook.

It lives with the widgets, not in the trainer: ``train`` only hands each history row to a callback,
and drawing that row into a notebook cell is the notebook's business (IPython, matplotlib), which a
run on a server or under ``torchrun`` never needs.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..plots import loss_curves
from ..validation import check_int


class LiveLossPlot:
    """A ``train`` callback that redraws the loss curve in a notebook cell as history rows arrive.

    ``wb.train(cfg, callback=LiveLossPlot())``: one output cell, updated in place every ``every`` rows.
    """

    def __init__(self, every: int = 1, title: str = "") -> None:
        check_int("every", every, 1)  # checked here, not as a ZeroDivisionError in the middle of training
        self.every, self.title, self.rows, self._handle = every, title, [], None

    def __call__(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) % self.every == 0:
            self._show(pd.DataFrame(self.rows))

    def on_train_end(self, history: pd.DataFrame) -> None:
        """The rows logged since the last redraw are shown too: the cell ends on the whole run."""
        if len(self.rows) % self.every:
            self._show(history)

    def _show(self, history: pd.DataFrame) -> None:
        from IPython.display import display  # looked up per call, so a test can stand in for the notebook

        fig = loss_curves(history, title=self.title)
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
