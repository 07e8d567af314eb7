"""The live loss curve of a training run in a notebook (here, not in the trainer, which a server run never needs)."""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd

from ..plots import loss_curves
from ..validation import check_int


def in_notebook() -> bool:
    """Whether a kernel shows what ``display`` sends (a terminal would print a figure's repr into the progress bar)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


class LiveLossPlot:
    """A ``train`` callback redrawing the loss curve in one notebook cell every ``every`` history rows; outside a
    notebook it draws nothing and warns once (a figure file is ``plots.LossFigure``'s job)."""

    def __init__(self, every: int = 1, title: str = "") -> None:
        check_int("every", every, 1)  # checked here, not as a ZeroDivisionError in the middle of training
        self.every, self.title, self.rows, self._handle, self._warned = every, title, [], None, False

    def __call__(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) % self.every == 0:
            self._show(pd.DataFrame(self.rows))

    def on_train_end(self, history: pd.DataFrame) -> None:
        """Show the rows logged since the last redraw, so the cell ends on the whole run."""
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
