"""The slips of notebooks 05, 05b and 07' later exercises: each row (check, the reference solution written with a
slip switch, the switch, a phrase the check's message must say), merged into test_exercises.SLIPS."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.model_selection import GroupKFold

import exercises as ex


# ---------------------------------------------------------------------------------------------- 05
def majority_rate(labels, groups, folds, *, guess_from="train"):
    if guess_from == "chance":
        return 1.0 / len(np.unique(labels))
    scores = []
    for train, test in GroupKFold(n_splits=folds).split(labels, labels, groups):
        seen = {"train": labels[train], "all": labels, "test": labels[test]}[guess_from]
        values, counts = np.unique(seen, return_counts=True)
        scores.append(np.mean(labels[test] == values[np.argmax(counts)]))
    return float(np.mean(scores))


def layer_features(cache, depth, k, positions, *, embed=False, shifted=False, top="resid_post", from_zero=False,
                   last_pass=False, one_position=False):
    if depth == 0:
        name = "hook_embed" if embed else "hook_input"
    else:
        name = f"blocks.{depth - 1}.hook_resid_post"
    if shifted:  # depth l read as block l's output
        name = f"blocks.{depth}.hook_resid_post"
    if top == "final" and depth == cache.n_layer:
        name = "hook_final"
    acts = cache[name] if last_pass else cache.pass_(k + 1 if from_zero else k)[name]
    if one_position:
        return acts[:, int(positions[0])]
    return acts[torch.arange(acts.size(0)), positions]


# ---------------------------------------------------------------------------------------------- 05b
def flip_rate(clean, edited, answers, foils, *, count="changed"):
    if count == "argmax":
        return float((clean.argmax(-1) != edited.argmax(-1)).double().mean())
    rows = torch.arange(len(answers))
    before = clean[rows, answers] >= clean[rows, foils]
    after = edited[rows, answers] >= edited[rows, foils]
    if count == "wrong":
        return float((~after).double().mean())
    if count == "one way":
        return float((before & ~after).double().mean())
    return float((before != after).double().mean())


def paired_interval(values, reference, groups, n_boot, seed, *, unit="groups", paired=True, centre="mean"):
    values, reference = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ids = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in ids]
    boot = []
    for _ in range(n_boot):
        if unit == "groups":
            picks = [np.concatenate([members[i] for i in rng.integers(0, len(ids), len(ids))]) for _ in range(2)]
        else:
            picks = [rng.integers(0, len(values), len(values)) for _ in range(2)]
        if paired:
            picks[1] = picks[0]
        boot.append(values[picks[0]].mean() - reference[picks[1]].mean())
    low, high = np.percentile(boot, [2.5, 97.5])
    diff = values - reference
    return {"mean": float(np.median(diff) if centre == "median" else diff.mean()), "low": float(low),
            "high": float(high)}


# ---------------------------------------------------------------------------------------------- 07
def decode_forwards(regime, prompt_len, new_tokens, prefill_passes, *, first_token_free=True, plain_pass=True,
                    suffix_step=True, per_prompt_token=True):
    prefill = {"standard": 1, "soft": 1, "soft_last": 2 if suffix_step else 1,
               "fused": prefill_passes + (1 if plain_pass else 0),
               "sequential": prompt_len if per_prompt_token else 1}[regime]
    return prefill + new_tokens - (1 if first_token_free else 0)


def median_length_difference(traces, regime, *, per_seed=True, of="medians"):
    if not per_seed:
        return float(traces[traces["regime"] == regime]["length"].median()
                     - traces[traces["regime"] == "standard"]["length"].median())
    differences = []
    for _, run in traces.groupby("run"):
        if of == "differences":
            by = run.pivot_table(index="example", columns="regime", values="length")
            differences.append((by[regime] - by["standard"]).median())
        else:
            median = run.groupby("regime")["length"].median()
            differences.append(median[regime] - median["standard"])
    return float(np.mean(differences))


SLIPS: dict[str, tuple] = {
    "majority: all rows": (ex.check_majority_rate, majority_rate, dict(guess_from="all"), "training rows only"),
    "majority: the test rows": (ex.check_majority_rate, majority_rate, dict(guess_from="test"), "scored on"),
    "majority: one over the labels": (ex.check_majority_rate, majority_rate, dict(guess_from="chance"),
                                      "not 1 / \\(number of labels\\)"),
    "features: hook_embed at depth 0": (ex.check_layer_features, layer_features, dict(embed=True), "after fusion"),
    "features: depth off by one": (ex.check_layer_features, layer_features, dict(shifted=True), "off by one"),
    "features: hook_final on top": (ex.check_layer_features, layer_features, dict(top="final"), "final norm"),
    "features: passes from 0": (ex.check_layer_features, layer_features, dict(from_zero=True), "numbered from 1"),
    "features: the last pass": (ex.check_layer_features, layer_features, dict(last_pass=True), "is the last pass"),
    "features: one position for all": (ex.check_layer_features, layer_features, dict(one_position=True),
                                       "each example's own position"),
    "flips: wrong after the edit": (ex.check_flip_rate, flip_rate, dict(count="wrong"), "changed prediction"),
    "flips: one way only": (ex.check_flip_rate, flip_rate, dict(count="one way"), "either way"),
    "flips: argmax over the vocabulary": (ex.check_flip_rate, flip_rate, dict(count="argmax"), "against its foil"),
    "interval: examples resampled": (ex.check_paired_interval, paired_interval, dict(unit="examples"),
                                     "whole groups"),
    "interval: unpaired": (ex.check_paired_interval, paired_interval, dict(paired=False), "one difference per"),
    "interval: the median difference": (ex.check_paired_interval, paired_interval, dict(centre="median"),
                                        "the mean of values - reference"),
    "forwards: the first token too": (ex.check_decode_forwards, decode_forwards, dict(first_token_free=False),
                                      "prefill's last logits"),
    "forwards: fused without its plain pass": (ex.check_decode_forwards, decode_forwards, dict(plain_pass=False),
                                               "plain pass first"),
    "forwards: soft_last as soft": (ex.check_decode_forwards, decode_forwards, dict(suffix_step=False),
                                    "that token by the recurrence"),
    "forwards: sequential as one pass": (ex.check_decode_forwards, decode_forwards, dict(per_prompt_token=False),
                                         "one forward per prompt token"),
    "median: pooled over seeds": (ex.check_median_length_difference, median_length_difference,
                                  dict(per_seed=False), "pooled over every seed"),
    "median: of the differences": (ex.check_median_length_difference, median_length_difference,
                                   dict(of="differences"), "not the difference of the medians"),
}
