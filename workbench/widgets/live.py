"""A live loss curve in a notebook (not in the trainer: server runs never need it)."""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd

from ..plots import loss_curves
from ..validation import check_int


def in_notebook() -> bool:
    """Whether a kernel shows ``display`` output (a terminal prints reprs into the progress bar)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


class LiveLossPlot:
    """``train`` callback redrawing the loss in one cell; outside a notebook it warns once."""

    def __init__(self, every: int = 1, title: str = "") -> None:
        check_int("every", every, 1)  # checked here, not as a ZeroDivisionError in the middle of training
        self.every, self.title, self.rows, self._handle, self._warned = every, title, [], None, False

    def __call__(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) % self.every == 0:
            self._show(pd.DataFrame(self.rows))

    def on_train_end(self, history: pd.DataFrame) -> None:
        """Redraw so the cell ends on the whole run."""
        if len(self.rows) % self.every:
            self._show(history)

    def _show(self, history: pd.DataFrame) -> None:
        if not in_notebook():
            if not self._warned:
                warnings.warn("LiveLossPlot draws only in a notebook (a file: plots.LossFigure)", stacklevel=2)
                self._warned = True
            return
        from IPython.display import display  # looked up per call, so a test can stand in for the notebook

        fig = loss_curves(history, title=self.title)
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
