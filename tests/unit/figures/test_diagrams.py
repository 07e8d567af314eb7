"""The package's diagrams: each returns a Figure with the panels, labels and memory arrows its rule implies."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import diagrams


def memory_arrows(fig: Figure) -> int:
    return sum(p.get_gid() == "memory" for ax in fig.axes for p in ax.patches)


def texts(fig: Figure) -> str:
    return " ".join([t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title() for ax in fig.axes])


@pytest.mark.parametrize("mechanism, layers, arrows_per_position", [("fbt", 3, 1), ("lrt", 3, 3), ("none", 2, 0)])
def test_recurrence_draws_one_memory_arrow_per_reading_point(mechanism, layers, arrows_per_position):
    fig = diagrams.recurrence(positions=4, layers=layers, mechanism=mechanism)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    assert memory_arrows(fig) == 3 * arrows_per_position  # position 0 reads nothing
    title = fig.axes[0].get_title()
    assert "m_{t-1}" in title
    # the baseline reads no memory: its title must not say that token t reads one
    assert ("token t reads" in title) == (mechanism != "none") and ("no memory" in title) == (mechanism == "none")
    assert ("$m_{2}$" in texts(fig)) == (mechanism != "none")


def test_interleaved_reads_is_the_schedules_rule():
    """Subset s reads the pass that refined subset s-1 in this sweep; subset 0 reads the init pass."""
    assert diagrams.interleaved_reads(7, 3) == {1: 1, 2: 2, 3: 0, 4: 1, 5: 2, 6: 0}
    assert set(diagrams.interleaved_reads(5, 1).values()) == {0}  # S = 1: everything reads the init pass
    # S = T: every position reads its predecessor's refined memory, which is why interleaved(T) is exact
    assert diagrams.interleaved_reads(6, 6) == {t: t for t in range(1, 6)}
    model = perturbed_model(small_config("lrt", lrt_gamma_init=0.5))
    idx = torch.randint(0, 23, (2, 6))
    exact = wb.schedules.Sequential().run(model, idx).logits
    torch.testing.assert_close(wb.schedules.Interleaved(6).run(model, idx).logits, exact)


def test_interleaved_sweep_rows_and_arrows():
    fig = diagrams.interleaved_sweep(seq_len=8, subsets=3)
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith("init pass") and labels[1:] == [f"subset {s}: t % 3 = {s}" for s in range(3)]
    assert memory_arrows(fig) == 7
    assert "interleaved(S=3)" in fig.get_suptitle() and "0 = init" in fig.get_suptitle()  # the numbering defined


def test_jacobi_passes_staircase():
    fig = diagrams.jacobi_passes(seq_len=5)
    (ax,) = fig.axes
    assert len(ax.get_yticklabels()) == 5 and memory_arrows(fig) == 4
    exact = sum(p.get_facecolor()[:3] == pytest.approx((0x74 / 255, 0xc4 / 255, 0x76 / 255)) for p in ax.patches
                if p.get_gid() != "memory")
    assert exact == sum(min(k, 5) for k in range(1, 6))  # pass k is exact at positions t < k
    assert memory_arrows(diagrams.jacobi_passes(seq_len=5, passes=2)) == 1


def test_fbt_fusion_labels():
    fig = diagrams.fbt_fusion()
    words = texts(fig)
    for label in ("$W_U$", "$W_G$", "gate path", "value path", "m_{t-1}", "e_t"):
        assert label in words
    assert memory_arrows(fig) == 2


def test_decoding_regimes_panels():
    fig = diagrams.decoding_regimes(prompt_len=4, new_tokens=3, prefill_passes=2)
    assert [ax.get_title() for ax in fig.axes] == ["STANDARD", "SOFT", "FUSED"]
    keys = [t.get_text() for t in fig.legends[0].get_texts()]  # every fill colour has a key
    assert keys == ["prompt, plain pass (reads no memory)", "prompt, fused prefill pass (reads the pass above)",
                    "generated token"]
    per_panel = [sum(p.get_gid() == "memory" for p in ax.patches) for ax in fig.axes]
    assert per_panel == [0, 3, 2 * 3 + 3]  # FUSED: two fused prefill passes over positions 1..3, then as SOFT
    assert len(fig.axes[2].get_yticklabels()) == 3


@pytest.mark.parametrize("call, name", [
    (lambda: diagrams.recurrence(positions=1), "positions"),
    (lambda: diagrams.recurrence(layers=0), "layers"),
    (lambda: diagrams.recurrence(mechanism="rnn"), "mechanism"),
    (lambda: diagrams.recurrence(layers=3, source_layer=3), "source_layer"),
    (lambda: diagrams.interleaved_sweep(seq_len=8, subsets=0), "subsets"),
    (lambda: diagrams.interleaved_sweep(seq_len=1), "seq_len"),
    (lambda: diagrams.interleaved_reads(4, 5), "subsets"),
    (lambda: diagrams.jacobi_passes(seq_len=4, passes=0), "passes"),
    (lambda: diagrams.decoding_regimes(prompt_len=1), "prompt_len"),
    (lambda: diagrams.decoding_regimes(new_tokens=0), "new_tokens"),
    (lambda: diagrams.decoding_regimes(prefill_passes=0), "prefill_passes"),
])
def test_bad_arguments_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        call()
