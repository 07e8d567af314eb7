"""Diagrams of what schedules and the decoder do (``plots`` draws measurements)."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from .decode import REGIMES
from .plots import new_figure
from .validation import check_int, fail

PLAIN, READS, EXACT, ACCENT = "#d9d9d9", "#9ecae1", "#74c476", "#d62728"
SUBSET_COLOURS = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1")


def _memory_arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], rad: float = 0.0) -> None:
    """An arrow that carries memory (``gid="memory"``: tests count them)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, lw=1.2, color=ACCENT,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=4, shrinkB=4, gid="memory", zorder=3))


def _cell(ax: Axes, x: float, y: float, colour: str, text: str = "", size: float = 0.8) -> None:
    ax.add_patch(Rectangle((x - size / 2, y - size / 2), size, size, facecolor=colour, edgecolor="black", lw=0.6))
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=8)


def _bare(ax: Axes) -> None:
    ax.grid(False)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


# ---------------------------------------------------------------------------------------------- the one idea
DRAWN = ("none", "lrt", "fbt")  # the mechanisms this drawing can place the memory for


def recurrence(positions: int = 4, layers: int = 3, mechanism: str = "fbt", source_layer: int = -1) -> Figure:
    """Token t reads ``m_{t-1}``: FBT into the input, LRT from ``source_layer`` into each block."""
    check_int("positions", positions, 2, 12)
    check_int("layers", layers, 1, 8)
    if mechanism not in DRAWN:
        fail("mechanism", mechanism, f"must be one of {DRAWN}")
    check_int("source_layer", source_layer, -1, layers - 1)
    fig, (ax,) = new_figure(1, panel=(1.5 + 1.3 * positions, 1.4 + 0.7 * layers))
    source = layers if source_layer == -1 else source_layer + 1  # depth of the state read as memory
    for t in range(positions):
        for depth in range(layers + 1):
            colour = EXACT if (mechanism != "none" and depth == source) else (PLAIN if depth == 0 else "white")
            _cell(ax, t, depth, colour, "x" if depth == 0 else f"{depth - 1}", size=0.5)
            if depth:
                ax.annotate("", (t, depth - 0.25), (t, depth - 0.75),
                            arrowprops=dict(arrowstyle="-|>", color="black", lw=0.8))
        ax.text(t, -0.7, f"token {t}", ha="center", va="top", fontsize=9)
        if t == 0 or mechanism == "none":
            continue
        targets = [0] if mechanism == "fbt" else list(range(1, layers + 1))
        for depth in targets:
            _memory_arrow(ax, (t - 1 + 0.25, source), (t - 0.25, depth), rad=-0.15)
        ax.text(t - 0.5, source + 0.45, f"$m_{{{t - 1}}}$", ha="center", fontsize=9, color=ACCENT)
    ax.text(-0.5, (layers + 1) / 2, "block", rotation=90, ha="center", va="center", fontsize=8)
    what = {"fbt": "token t reads $m_{t-1}$: top state fused into the input (FBT)",
            "none": "baseline: no memory $m_{t-1}$; only the sampled token crosses",
            "lrt": f"token t reads $m_{{t-1}}$: block {source - 1}{' (top)' if source_layer == -1 else ''} state "
                   "into every block (LRT)"}
    ax.set(xlim=(-0.7, positions - 0.3), ylim=(-1.2, layers + 0.9), title=what[mechanism])
    _bare(ax)
    return fig


# ---------------------------------------------------------------------------------------------- schedules
def interleaved_reads(seq_len: int, subsets: int) -> dict[int, int]:
    """Per t > 0, the pass whose memory of t-1 it reads (0: init pass)."""
    check_int("seq_len", seq_len, 2)
    check_int("subsets", subsets, 1, seq_len)
    return {t: (t % subsets) for t in range(1, seq_len)}


def interleaved_sweep(seq_len: int = 8, subsets: int = 2) -> Figure:
    """An interleaved sweep, each cell labelled as ``interleaved_reads`` says."""
    check_int("seq_len", seq_len, 2, 24)
    check_int("subsets", subsets, 1, min(seq_len, len(SUBSET_COLOURS)))
    reads = interleaved_reads(seq_len, subsets)
    fig, (ax,) = new_figure(1, panel=(1.6 + 0.55 * seq_len, 1.2 + 0.6 * (subsets + 1)))
    for t in range(seq_len):
        _cell(ax, t, 0, PLAIN, "")
        s = t % subsets
        row = s + 1
        _cell(ax, t, row, SUBSET_COLOURS[s], "" if t == 0 else str(reads[t]))
        if t:  # from the source cell's bottom edge to this cell's top edge: the arrowhead stays off the digit
            _memory_arrow(ax, (t - 1 + 0.2, reads[t] + 0.4), (t - 0.2, row - 0.4), rad=0.2)
    labels = ["init pass (no memory)"] + [f"subset {s}: t % {subsets} = {s}" for s in range(subsets)]
    ax.set_yticks(range(subsets + 1), labels)
    ax.set_xticks(range(seq_len))
    ax.set(xlim=(-0.6, seq_len - 0.4), ylim=(subsets + 0.6, -0.6), xlabel="position t")
    fig.suptitle(f"interleaved(S={subsets}): a cell's digit is the pass\nwhose $m_{{t-1}}$ it reads "
                 "(0 = init, s + 1 = subset s)", fontsize=10)
    ax.grid(False)
    return fig


def jacobi_passes(seq_len: int = 6, passes: int | None = None) -> Figure:
    """Pass k reads pass k-1's memory shifted by one, so it is exact at ``t < k``."""
    check_int("seq_len", seq_len, 2, 24)
    passes = seq_len if passes is None else passes
    check_int("passes", passes, 1, 24)
    fig, (ax,) = new_figure(1, panel=(1.4 + 0.55 * seq_len, 1.0 + 0.55 * passes))
    for k in range(1, passes + 1):
        for t in range(seq_len):
            _cell(ax, t, k, EXACT if t < k else PLAIN)
        if 1 < k <= seq_len:
            _memory_arrow(ax, (k - 2, k - 1), (k - 1, k), rad=0.2)
    ax.set_yticks(range(1, passes + 1), [f"pass {k}" + (" (plain)" if k == 1 else "") for k in range(1, passes + 1)])
    ax.set_xticks(range(seq_len))
    ax.set(xlim=(-0.6, seq_len - 0.4), ylim=(passes + 0.6, 0.4), xlabel="position t",
           title="Jacobi passes: exact (green) at t < k")
    ax.grid(False)
    return fig


# ---------------------------------------------------------------------------------------------- FBT
def fbt_fusion() -> Figure:
    """The GLU fusion: the carried state on the value path, the token only gating it."""
    fig, (ax,) = new_figure(1, panel=(9.0, 3.2))
    boxes = {  # key: (x, y, width, label)
        "e": (0.0, 2.0, 2.2, "token embedding $e_t$"), "norm_e": (2.6, 2.0, 1.4, "RMSNorm"),
        "W_G": (4.4, 2.0, 1.2, "$W_G$"), "sigma": (6.2, 2.0, 1.4, r"$\sigma$ (gate)"),
        "m": (0.0, 0.0, 2.2, "memory $m_{t-1}$"), "W_U": (4.4, 0.0, 1.2, "$W_U$"),
        "mul": (8.0, 1.0, 0.8, r"$\odot$"), "norm_u": (9.6, 1.0, 1.4, "RMSNorm"),
        "u": (11.4, 1.0, 1.4, "$u_t$ → block 0"),
    }
    for key, (x, y, width, label) in boxes.items():
        colour = EXACT if key == "m" else (PLAIN if key == "e" else "white")
        ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.3), width, 0.6, boxstyle="round,pad=0.05", facecolor=colour,
                                    edgecolor="black", lw=0.8))
        ax.text(x, y, label, ha="center", va="center", fontsize=9)

    def edges(a: str, b: str) -> tuple[tuple[float, float], tuple[float, float]]:
        (xa, ya, wa, _), (xb, yb, wb, _) = boxes[a], boxes[b]
        return (xa + wa / 2 + 0.05, ya), (xb - wb / 2 - 0.05, yb)

    for a, b in [("e", "norm_e"), ("norm_e", "W_G"), ("W_G", "sigma"), ("sigma", "mul"), ("mul", "norm_u"),
                 ("norm_u", "u")]:
        start, end = edges(a, b)
        ax.annotate("", end, start, arrowprops=dict(arrowstyle="-|>", color="black", lw=1.0, shrinkA=0, shrinkB=0))
    for a, b in [("m", "W_U"), ("W_U", "mul")]:
        _memory_arrow(ax, *edges(a, b))
    ax.text(4.4, 2.55, "gate path: the token", ha="center", fontsize=9)
    ax.text(4.4, -0.6, "value path: the state = RMSNorm($h^L_{t-1}$)", ha="center", fontsize=9, color=ACCENT)
    ax.set(xlim=(-1.3, 12.3), ylim=(-0.9, 2.9),
           title=r"FBT fusion: $u_t$ = RMSNorm($(W_U\, m_{t-1}) \odot \sigma(W_G\,$RMSNorm$(e_t))$)")
    _bare(ax)
    return fig


def decoding_regimes(prompt_len: int = 4, new_tokens: int = 3, prefill_passes: int = 2) -> Figure:
    """STANDARD / SOFT / FUSED on the same weights."""
    check_int("prompt_len", prompt_len, 2, 12)
    check_int("new_tokens", new_tokens, 1, 12)
    check_int("prefill_passes", prefill_passes, 1, 6)
    T = prompt_len + new_tokens
    fig, axes = new_figure(len(REGIMES), panel=(0.9 + 0.5 * T, 1.6 + 0.5 * (prefill_passes + 1)))
    for ax, regime in zip(axes, REGIMES):
        prompt_rows = prefill_passes + 1 if regime == "fused" else 1
        top = prompt_rows - 1  # the prompt pass the generated tokens continue from
        for k in range(prompt_rows):
            for t in range(prompt_len):
                _cell(ax, t, k, PLAIN if k == 0 else READS)
                if k and t:
                    _memory_arrow(ax, (t - 1, k - 1), (t, k), rad=0.2)
        for t in range(prompt_len, T):
            _cell(ax, t, top, "#6baed6")
            if regime != "standard":
                _memory_arrow(ax, (t - 1, top), (t, top), rad=-0.6)
        ax.axvline(prompt_len - 0.5, color="black", lw=0.6, ls=":")
        ax.set_xticks(range(T))
        ax.set_yticks(range(prompt_rows), [f"pass {k + 1}" for k in range(prompt_rows)])
        ax.set(xlim=(-0.6, T - 0.4), ylim=(prompt_rows - 0.3, -0.9), xlabel="position (prompt | generated)",
               title=regime.upper())
        ax.grid(False)
    keys = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black", lw=0.6) for c in (PLAIN, READS, "#6baed6")]
    fig.legend(keys, ["prompt, plain pass (reads no memory)", "prompt, fused prefill pass (reads the pass above)",
                      "generated token"], fontsize=8, loc="outside lower center", ncols=3, frameon=False)
    fig.suptitle("decoding regimes on the same weights: red arrows carry memory")
    return fig
