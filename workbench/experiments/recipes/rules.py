"""Decision rules shared by several recipes, in words; the code that applies them is ``evaluation.verdict``."""

from ...evaluation import MIN_SEEDS

DIFFERENCE = ("reproduces when the 95 % hierarchical bootstrap interval (seeds, then held-out examples) of "
              "{diff} lies {side} 0; does not reproduce when it lies on the other side of 0; inconclusive when it "
              f"contains 0; not tested with fewer than {MIN_SEEDS} seeds per arm or when a gate fails.")


def difference(diff: str, higher_is_better: bool) -> str:
    """The rule for "arm A beats arm B" on a metric."""
    return DIFFERENCE.format(diff=diff, side="above" if higher_is_better else "below")
