"""Causal interventions on the feedback channel: exact in float64 under every schedule and regime."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config, variant_config
from workbench import schedules
from workbench.analysis import interventions as iv
from workbench.hooks import hook_points

T = 9
RUNS = {
    "sequential": dict(schedule="sequential"),
    "multipass3": dict(schedule=schedules.Multipass(3)),
    "interleaved2": dict(schedule=schedules.Interleaved(2)),
    "blockwise3": dict(schedule=schedules.Blockwise(3)),
    "soft": dict(regime="soft", prompt_len=4),
    "fused": dict(regime="fused", prompt_len=4, prefill_passes=2),
}
VARIANTS = ("fbt", "lrt_shared_top", "lrt_per_layer_mid")


@pytest.fixture(scope="module", params=VARIANTS)
def model(request) -> wb.GPT:
    return perturbed_model(variant_config(request.param))


def _sites(model: wb.GPT) -> list[str]:
    """``memory`` and the model's last other site (FBT's input, LRT's top injection): the loops stay fast."""
    every = iv.sites(model)
    return [every[0], every[-1]]


def _tokens(seed: int, B: int = 3) -> torch.Tensor:
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(seed))


def test_sites_name_hook_points_and_refuse_the_others(model):
    names = {iv.site_hook_name(model, s) for s in iv.sites(model)}
    assert names <= set(hook_points(model))
    with pytest.raises(ValueError, match="site="):
        iv.site_hook_name(model, "inject99")
    with pytest.raises(ValueError, match="site="):
        iv.site_hook_name(model, "input" if model.config.mechanism == "lrt" else "inject0")


@pytest.mark.parametrize("run", sorted(RUNS))
def test_patching_a_run_with_its_own_memory_reproduces_it_exactly(model, run):
    idx = _tokens(0)
    for site in _sites(model):
        clean = iv.record_site(model, idx, site, **RUNS[run])
        for position in (1, 5, T - 1):
            out = iv.intervene(model, idx, iv.Intervention("patch", rows=torch.arange(3)), position, site, clean,
                               **RUNS[run])
            assert torch.equal(out, clean.logits), (site, position)
    # and an edit that returns the tensor it got, at every forward and position
    with iv.feedback_hooks(model, {s: (lambda t, *, hook: t.clone()) for s in iv.sites(model)}):
        again = iv.run_logits(model, idx, **RUNS[run])
    assert torch.equal(again, iv.run_logits(model, idx, **RUNS[run]))


@pytest.mark.parametrize("run", sorted(RUNS))
def test_an_intervention_where_no_memory_is_read_changes_nothing(model, run):
    idx, source = _tokens(0), _tokens(1)
    reads = iv.reads_memory(idx, **RUNS[run])
    plain = [p for p in range(T) if not bool(reads[0, p])]
    assert plain[0] == 0
    plain = plain[:1] + plain[-1:]  # position 0 and the last plain position (a prefix, a block's inside)
    clean = iv.run_logits(model, idx, **RUNS[run])
    for site in _sites(model):
        for intervention in (iv.Intervention("zero"), iv.Intervention("mean"), iv.Intervention("patch", source=source)):
            for position in plain:
                out = iv.intervene(model, idx, intervention, position, site, **RUNS[run])
                assert torch.equal(out, clean), (site, intervention.kind, position)
    # ... while at a position that reads memory the same edit does change the logits (the test can fail)
    reading = [p for p in range(T) if bool(reads[0, p])][0]
    assert not torch.allclose(iv.intervene(model, idx, iv.Intervention("zero"), reading, **RUNS[run]), clean)


def test_a_schedule_value_runs_and_reads_as_its_json_form(model):
    idx = _tokens(5)
    for value in (wb.schedules.Blockwise(3), wb.schedules.Multipass(2)):
        logits = iv.run_logits(model, idx, schedule=value)
        assert torch.equal(logits, iv.run_logits(model, idx, schedule=value.to_dict()))
        assert torch.equal(iv.reads_memory(idx, schedule=value), iv.reads_memory(idx, schedule=value.to_dict()))


def test_ablation_under_sequential_equals_ablation_under_multipass_T(model):
    idx, source = _tokens(2), _tokens(3)
    for site in _sites(model):
        for intervention in (iv.Intervention("zero"), iv.Intervention("mean"), iv.Intervention("patch", source=source),
                             iv.Intervention("patch", rows=torch.tensor([2, 0, 1]))):
            exact = iv.intervene(model, idx, intervention, 4, site, schedule="sequential")
            jacobi = iv.intervene(model, idx, intervention, 4, site, schedule=wb.schedules.Multipass(T))
            gauss_seidel = iv.intervene(model, idx, intervention, 4, site, schedule=wb.schedules.Interleaved(T))
            torch.testing.assert_close(jacobi, exact, rtol=0, atol=1e-10)
            torch.testing.assert_close(gauss_seidel, exact, rtol=0, atol=1e-10)
            assert not torch.allclose(exact[:, 4:], iv.run_logits(model, idx)[:, 4:])
    # SOFT decoding of a 4-token prompt is the exact recurrence with a plain prefix of 4
    soft = iv.intervene(model, idx, iv.Intervention("zero"), 6, regime="soft", prompt_len=4)
    torch.testing.assert_close(soft, iv.intervene(model, idx, iv.Intervention("zero"), 6, schedule="sequential",
                                                  plain_prefix=4), rtol=0, atol=1e-10)


def test_zero_memory_equals_zero_at_every_injection_point_and_each_point_is_its_own():
    model = perturbed_model(variant_config("lrt_shared_top"))
    idx = _tokens(4)
    where = torch.zeros(3, T, dtype=torch.bool)
    where[:, 5] = True
    record = iv.record_site(model, idx, "memory")
    zero = iv.edit_function(iv.Intervention("zero"), where, record)
    with iv.feedback_hooks(model, {f"inject{layer}": zero for layer in range(model.config.n_layer)}):
        every_layer = iv.run_logits(model, idx)
    with iv.feedback_hooks(model, {"memory": zero}):
        memory = iv.run_logits(model, idx)
    torch.testing.assert_close(every_layer, memory, rtol=0, atol=1e-12)
    one = iv.intervene(model, idx, iv.Intervention("zero"), 5, "inject0")
    assert not torch.allclose(one, memory) and not torch.allclose(one, record.logits)


def test_zeroing_the_memory_is_the_model_run_with_zero_memory_by_hand():
    model = perturbed_model(small_config("fbt"))
    idx = _tokens(5)
    out = iv.intervene(model, idx, iv.Intervention("zero"), 3, schedule="sequential")
    memory = schedules.Sequential().run(model, idx[:, :3]).memory  # positions before 3 are untouched
    cache = model.new_kv_cache(3, T)
    schedules.Sequential().prefill(model, idx[:, :3], cache)
    by_hand = model.step(idx[:, 3:4], memory=torch.zeros_like(memory[:, -1:]), positions=torch.tensor([3]), kv=cache)
    torch.testing.assert_close(out[:, 3], by_hand.logits[:, 0], rtol=0, atol=1e-12)


def test_intervention_effects_table():
    model = perturbed_model(small_config("fbt"))
    idx = _tokens(6, B=4)
    answers, foils = idx[:, -1], (idx[:, -1] + 1) % 23
    table = iv.intervention_effects(model, idx, [0, 4], answers, foils=foils, answer_positions=T - 1)
    assert list(table.columns) == ["site", "position", "intervention", "n", "logit_diff_clean", "logit_diff",
                                   "logit_diff_change", "flip_rate"]
    assert len(table) == 4 and table["flip_rate"].between(0, 1).all()
    at0 = table[table["position"] == 0]
    assert (at0["logit_diff_change"] == 0).all() and (at0["flip_rate"] == 0).all()
    rows = iv.intervention_effects(model, idx, 4, answers, ["zero"], foils=foils, answer_positions=T - 1,
                                   per_example=True)
    logits = iv.intervene(model, idx, iv.Intervention("zero"), 4)[:, -1].double()
    expected = (logits[torch.arange(4), answers] - logits[torch.arange(4), foils]).numpy()
    np.testing.assert_allclose(rows["logit_diff"], expected, rtol=0, atol=1e-12)
    clean = iv.run_logits(model, idx)[:, -1].double()
    before = (clean[torch.arange(4), answers] - clean[torch.arange(4), foils]).numpy()
    np.testing.assert_array_equal(rows["flipped"], np.sign(before) != np.sign(expected))
    with pytest.raises(ValueError, match="positions"):
        iv.intervention_effects(model, idx, T, answers)
    with pytest.raises(ValueError, match="answers"):
        iv.intervention_effects(model, idx, 1, answers[:2])
    with pytest.raises(ValueError, match="kind"):
        iv.Intervention("swap")
    with pytest.raises(ValueError, match="rows.*source"):
        iv.Intervention("patch")
    with pytest.raises(ValueError, match="regime"):
        iv.run_logits(model, idx, regime="hard", prompt_len=2)
    with pytest.raises(ValueError, match="prompt_len"):
        iv.run_logits(model, idx, regime="soft")
    with pytest.raises(ValueError, match="schedule"):
        iv.run_logits(model, idx, schedule="jacobi")


def test_ablation_by_distance_matches_single_interventions():
    model = perturbed_model(variant_config("lrt_shared_top"))
    idx = _tokens(7)
    frame = iv.ablation_by_distance(model, idx, 3, kind="zero", batch_size=5)
    assert set(frame["distance"]) == {1, 2, 3} and (frame["target_position"] == frame["position"]
                                                     + frame["distance"] - 1).all()
    # every position that reads memory, but the last: it has no next-token target
    assert sorted(frame["position"].unique()) == list(range(1, T - 1)) and (frame["target_position"] < T - 1).all()
    logits = iv.intervene(model, idx, iv.Intervention("zero"), 4)
    losses = torch.nn.functional.cross_entropy(logits[:, 5].double(), idx[:, 6], reduction="none")
    got = frame[(frame["position"] == 4) & (frame["distance"] == 2)].sort_values("example")["loss"]
    np.testing.assert_allclose(got, losses.numpy(), rtol=0, atol=1e-12)
    assert (frame.loc[frame["distance"] == 1, "increase"].abs() > 0).any()
    with pytest.raises(ValueError, match="kind"):
        iv.ablation_by_distance(model, idx, 2, kind="patch")
    with pytest.raises(ValueError, match="max_distance"):
        iv.ablation_by_distance(model, idx, 0)


def test_intervene_checks_its_source_and_rows():
    model = perturbed_model(small_config("fbt"))
    idx = _tokens(8)
    with pytest.raises(ValueError, match="source"):
        iv.intervene(model, idx, iv.Intervention("patch", source=_tokens(8, B=2)), 3)
    with pytest.raises(ValueError, match="rows"):
        iv.intervene(model, idx, iv.Intervention("patch", rows=torch.tensor([0, 1, 3])), 3)
    with pytest.raises(ValueError, match="positions"):
        iv.intervene(model, idx, iv.Intervention("zero"), T)
    # rows into a larger source run: each row takes the memory of the source row it names
    source = _tokens(9, B=5)
    got = iv.intervene(model, idx, iv.Intervention("patch", rows=torch.tensor([4, 4, 0]), source=source), 3)
    expected = iv.intervene(model, idx, iv.Intervention("patch", source=source[[4, 4, 0]]), 3)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)  # batches of 5 and 3 rows: rounding only


@pytest.mark.parametrize("positions", [1.5, torch.tensor([1.0, 2.0, 3.0]), torch.tensor(2.0), [1.0, 2.0, 3.0],
                                       torch.tensor([True, False, True]), "1"], ids=repr)
def test_intervene_wants_integer_positions(positions):
    """A float (or bool) position used to fail as an index ("tensors used as indices must be long ..."), naming nothing;
    it is refused by name with what is allowed, and the integer forms still run."""
    model = perturbed_model(small_config("fbt"))
    idx = _tokens(8)
    with pytest.raises(ValueError, match="^positions=.*int"):
        iv.intervene(model, idx, iv.Intervention("zero"), positions)
    iv.intervene(model, idx, iv.Intervention("zero"), torch.tensor([1, 2, 3], dtype=torch.int32))


def test_feedback_hooks_reach_generation():
    model = perturbed_model(small_config("fbt"))
    prompt = _tokens(10)[:, :4]
    seen = []

    def keep(memory, *, hook):
        seen.append((hook.forward, hook.positions.tolist(), memory.clone()))

    with iv.feedback_hooks(model, {"memory": keep}):
        tokens, logits = wb.generate(model, prompt, 4, regime="soft", return_logits=True)
    assert [(f, pos) for f, pos, _ in seen] == [(0, [4]), (1, [5]), (2, [6])]  # every generated token's read
    with iv.feedback_hooks(model, {"memory": lambda memory, *, hook: seen[hook.forward][2]}):
        again, same = wb.generate(model, prompt, 4, regime="soft", return_logits=True)
    assert torch.equal(again, tokens) and torch.equal(same, logits)
    with iv.feedback_hooks(model, {"memory": lambda memory, *, hook: torch.zeros_like(memory)}):
        _, zeroed = wb.generate(model, prompt, 4, regime="soft", return_logits=True)
    assert torch.equal(zeroed[:, 0], logits[:, 0]) and not torch.allclose(zeroed[:, 1:], logits[:, 1:])


def test_the_swap_patch_exercise_check_passes_a_solution_and_fails_the_usual_slips():
    import exercises as ex

    def solution(model, tokens, i, j, p, memory_at=None, step_at=None):
        with torch.no_grad():
            source = model.step(tokens[j:j + 1, :p + 1]).memory
            memory = source[:, p - 1:p] if memory_at is None else source[:, memory_at:memory_at + 1]
            cache = model.new_kv_cache(1, p + 1)
            model.step(tokens[i:i + 1, :p], kv=cache)
            where = torch.tensor([p if step_at is None else step_at])
            return model.step(tokens[i:i + 1, p:p + 1], memory=memory, positions=where, kv=cache).logits[0, -1]

    ex.check_swap_patch(solution)
    for slip in (lambda m, t, i, j, p: solution(m, t, i, i, p),  # its own memory
                 lambda m, t, i, j, p: solution(m, t, i, j, p, memory_at=p),  # the memory position p produces
                 lambda m, t, i, j, p: solution(m, t, i, j, p, step_at=0)):  # the step not told its position
        with pytest.raises(AssertionError, match="reading example"):
            ex.check_swap_patch(slip)


def test_a_knob_beside_the_schedule_is_refused_not_swallowed(model):
    """``passes=3`` beside a schedule once went unread by ``reads_memory``; every run keyword is now one both take."""
    with pytest.raises(TypeError, match="passes"):
        iv.intervene(model, _tokens(2), iv.Intervention("zero"), 3, schedule="multipass", passes=3)
