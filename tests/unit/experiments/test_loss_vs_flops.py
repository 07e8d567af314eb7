"""plots.loss_vs_flops: seed bands mark by mark, the floor line, one panel per x axis."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench import plots


def history(offset: float, seconds: float = 1.0) -> pd.DataFrame:
    marks = np.arange(1, 6)
    return pd.DataFrame({"flops": marks * 1e9, "seconds": marks * seconds, "val_bpb": 4.0 / marks + offset})


def test_mean_line_band_over_seeds_and_floor():
    fig = plots.loss_vs_flops({"a": [history(0.0), history(0.2)], "b": [history(0.5)]}, floor=4.5,
                              x=("flops", "seconds"), extra_panel=True)
    assert len(fig.axes) == 3 and fig.axes[1].get_xlabel() == "training wall-clock (s)"
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_ydata(), 4.0 / np.arange(1, 6) + 0.1)  # the mean of the two seeds
    band = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(4.0 / 5) and band.max() == pytest.approx(4.0 + 0.2)  # min..max over seeds
    assert len(fig.axes[0].collections) == 1  # one seed: no band
    assert any(l.get_ydata()[0] == 4.5 for l in fig.axes[1].get_lines())  # the floor on every panel
    assert "unigram 4.500" in [t.get_text() for t in fig.axes[1].get_legend().get_texts()]


def test_invalid_inputs_are_named():
    with pytest.raises(ValueError, match="x='step'"):
        plots.loss_vs_flops({"a": [history(0.0)]}, x="step")
    with pytest.raises(ValueError, match="curves"):
        plots.loss_vs_flops({"a": []})
