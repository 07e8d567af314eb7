"""Backbone: KV-cache decoding equals a full forward; hooks, dtypes, meta init, accounting."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from conftest import perturbed_model, small_config
from workbench.functional import norm
from workbench.hooks import hook_points


@pytest.mark.parametrize("n_layer,n_head,n_kv_head,n_embd", [(1, 1, None, 8), (3, 4, None, 32), (2, 4, 2, 32)])
@pytest.mark.parametrize("batch,length,prefill", [(1, 1, 1), (2, 9, 3), (3, 16, 1), (2, 12, 12)])
def test_kv_cache_decoding_matches_full_forward(n_layer, n_head, n_kv_head, n_embd, batch, length, prefill):
    cfg = small_config(n_layer=n_layer, n_head=n_head, n_kv_head=n_kv_head, n_embd=n_embd)
    model = perturbed_model(cfg, seed=length)
    idx = torch.randint(0, cfg.vocab_size, (batch, length))
    full = model(idx)
    cache = model.new_kv_cache(batch, length)
    chunks = [model.step(idx[:, :prefill], kv=cache).logits]
    for t in range(prefill, length):
        chunks.append(model.step(idx[:, t:t + 1], positions=torch.tensor([t]), kv=cache).logits)
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, rtol=0, atol=1e-12)


def test_kv_cache_refuses_overflow():
    model = perturbed_model(small_config())
    cache = model.new_kv_cache(1, 4)
    model.step(torch.zeros(1, 4, dtype=torch.long), kv=cache)
    with pytest.raises(ValueError, match="max_len=4"):
        model.step(torch.zeros(1, 1, dtype=torch.long), positions=torch.tensor([4]), kv=cache)


def test_positions_shift_rotary_consistently():
    """Scores depend on relative position only: the same tokens at positions +5 give the same logits."""
    model = perturbed_model(small_config())
    idx = torch.randint(0, 23, (2, 7))
    shifted = model.step(idx, positions=torch.arange(5, 12)).logits
    torch.testing.assert_close(shifted, model(idx), rtol=0, atol=1e-10)


def test_without_rope_attention_sees_the_prefix_as_a_set():
    """``rope=False`` leaves no positional signal: in one block, the last position's logits ignore the
    order of the tokens before it (attention sums over their embeddings), which RoPE's do not. (Deeper,
    the earlier positions' own states depend on their prefixes, hence on the order.)"""
    idx, reordered = torch.tensor([[3, 5, 7, 11, 2]]), torch.tensor([[11, 7, 3, 5, 2]])
    for rope in (False, True):
        model = perturbed_model(small_config(rope=rope, n_layer=1))
        change = (model(idx)[:, -1] - model(reordered)[:, -1]).abs().max().item()
        assert change < 1e-12 if not rope else change > 1e-3, (rope, change)


def test_qk_norm_normalises_each_head_and_off_passes_the_projections_through():
    """With RoPE off, ``hook_q`` is the query projection of the normed block input, each head's row at
    RMS 1 under QK-norm and untouched without it."""
    idx = torch.randint(0, 23, (2, 6))
    for qk_norm in (True, False):
        model = perturbed_model(small_config(rope=False, qk_norm=qk_norm))
        seen = {}

        def keep(t, hook, seen=seen):
            seen[hook.name] = t

        with wb.with_hooks(model, {"blocks.1.hook_resid_pre": keep, "blocks.1.attn.hook_q": keep}):
            model(idx)
        x, q = seen["blocks.1.hook_resid_pre"], seen["blocks.1.attn.hook_q"]
        attn = model.blocks[1].attn
        raw = attn.c_q(norm(x)).view(2, 6, attn.n_head, attn.head_dim).transpose(1, 2)
        if qk_norm:
            torch.testing.assert_close(q.pow(2).mean(-1), torch.ones(2, attn.n_head, 6, dtype=torch.float64))
            torch.testing.assert_close(q, norm(raw), rtol=0, atol=1e-12)
        else:
            torch.testing.assert_close(q, raw, rtol=0, atol=0)


def test_hook_names_are_stable_and_cover_every_depth():
    model = wb.build_model(small_config("lrt"))
    names = set(hook_points(model))
    for expected in ["hook_embed", "hook_input", "hook_memory", "hook_final", "blocks.0.hook_resid_pre",
                     "blocks.2.hook_resid_post", "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_gate"]:
        assert expected in names
    assert all(model.get_submodule(n).name == n for n in names)


def test_pattern_hook_matches_sdpa_and_can_intervene():
    model = perturbed_model(small_config())
    idx = torch.randint(0, 23, (2, 6))
    seen = {}
    with wb.with_hooks(model, {"blocks.1.attn.hook_pattern": lambda t, hook: seen.setdefault(hook.name, t)}):
        logits = model(idx)
    pattern = seen["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (2, 4, 6, 6)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 4, 6, dtype=torch.float64))
    assert torch.all(pattern.triu(1) == 0)
    torch.testing.assert_close(logits, model(idx), rtol=0, atol=1e-12)
    with wb.with_hooks(model, {"blocks.0.hook_resid_post": lambda t, hook: torch.zeros_like(t)}):
        assert not torch.allclose(model(idx), logits)
    with pytest.raises(ValueError, match="blocks.9.nope"):
        with wb.with_hooks(model, {"blocks.9.nope": lambda t, hook: None}):
            pass


def test_init_starts_blocks_as_identity_and_builds_on_meta():
    cfg = small_config()
    meta = wb.build_model(cfg, device="meta")
    assert all(p.is_meta for p in meta.parameters())
    model = wb.build_model(cfg)
    idx = torch.randint(0, 23, (1, 5))
    with torch.no_grad():
        x = F.rms_norm(model.wte(idx), (cfg.n_embd,))
        expected = F.linear(F.rms_norm(x, (cfg.n_embd,)), model.lm_head.weight)
        expected = cfg.logit_softcap * torch.tanh(expected / cfg.logit_softcap)
    torch.testing.assert_close(model(idx), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtypes_run(dtype):
    model = wb.build_model(small_config("fbt"), dtype=dtype)
    out = wb.schedules.Multipass(2).run(model, torch.randint(0, 23, (2, 5)))
    assert out.logits.dtype == dtype and torch.isfinite(out.logits.float()).all()


def test_tied_embeddings_share_one_matrix():
    untied, tied = wb.build_model(small_config()), wb.build_model(small_config(tie_embeddings=True))
    assert untied.num_params() - tied.num_params() == 23 * 32
    assert tied.num_params_by_group()["readout"] == 0


def test_flops_per_token_counts_matrices_and_attention():
    cfg = small_config()
    model = wb.build_model(cfg)
    groups = model.num_params_by_group()
    expected = 6 * (groups["blocks"] + groups["readout"]) + 12 * cfg.n_layer * cfg.n_embd * cfg.seq_len
    assert model.flops_per_token() == expected
    assert model.flops_per_token(2 * cfg.seq_len) > expected


def test_parameter_groups_partition_the_parameters():
    model = wb.build_model(small_config("lrt"))
    groups = model.parameter_groups()
    listed = [id(p) for ps in groups.values() for p in ps]
    assert sorted(listed) == sorted(id(p) for p in model.parameters())
    assert all(p.ndim == 2 for p in groups["matrices"]) and all(p.ndim == 1 for p in groups["scalars"])


def test_hooks_is_the_module_and_with_hooks_the_context():
    import types

    import workbench.hooks as hooks_module

    assert isinstance(wb.hooks, types.ModuleType) and wb.hooks is hooks_module
    model = wb.build_model(wb.ModelConfig(vocab_size=11, n_layer=1, n_head=1, n_embd=8, seq_len=4))
    idx = torch.randint(0, 11, (1, 4))
    plain = model(idx)
    with wb.with_hooks(model, {"hook_final": lambda t, hook: 2 * t}):
        assert not torch.equal(model(idx), plain)


def test_a_hook_key_may_be_a_predicate_on_names():
    """As in TransformerLens: one function on every hook point a filter accepts; a filter that accepts none
    is an error, like a name that is not a hook point."""
    model = wb.build_model(wb.ModelConfig(vocab_size=11, n_layer=3, n_head=1, n_embd=8, seq_len=4))
    idx = torch.randint(0, 11, (1, 4))
    seen = []
    residual_outputs = lambda name: name.endswith("hook_resid_post")  # noqa: E731
    with wb.with_hooks(model, [(residual_outputs, lambda t, hook: seen.append(hook.name))]):
        model(idx)
    assert seen == [f"blocks.{layer}.hook_resid_post" for layer in range(3)]
    model(idx)
    assert len(seen) == 3  # removed on leaving the block
    with pytest.raises(ValueError, match="<lambda>"):
        with wb.with_hooks(model, [(lambda name: name == "nope", lambda t, hook: None)]):
            pass


BAD_MEMORY = {  # what step is given beside idx (1, 3), and the parameter the refusal must name
    "memory_too_wide": (dict(memory=torch.zeros(1, 3, 31)), "memory"),
    "memory_too_long": (dict(memory=torch.zeros(1, 4, 32)), "memory"),
    "memory_integer": (dict(memory=torch.zeros(1, 3, 32, dtype=torch.long)), "memory"),
    "memory_list": (dict(memory=[[0.0] * 32] * 3), "memory"),
    "mask_too_short": (dict(memory=torch.zeros(1, 3, 32), memory_mask=torch.ones(1, 2, dtype=torch.bool)),
                       "memory_mask"),
    "mask_float": (dict(memory=torch.zeros(1, 3, 32), memory_mask=torch.ones(1, 3)), "memory_mask"),
}


@pytest.mark.parametrize("case", sorted(BAD_MEMORY))
@pytest.mark.parametrize("mechanism", ["none", "lrt", "fbt"])
def test_step_names_a_memory_it_cannot_use(mechanism, case):
    """A memory of the wrong shape or dtype is refused by name at ``step``, for every mechanism: before, LRT and FBT
    failed inside a matmul or broadcast ("mat1 and mat2 shapes ...") and the baseline ignored it silently."""
    model = wb.build_model(wb.ModelConfig(vocab_size=16, n_layer=1, n_head=2, n_embd=32, seq_len=8,
                                          mechanism=mechanism, tie_embeddings=mechanism == "fbt"))
    kwargs, name = BAD_MEMORY[case]
    with pytest.raises(ValueError, match=f"^{name} must be"):
        model.step(torch.zeros(1, 3, dtype=torch.long), **kwargs)
    model.step(torch.zeros(1, 3, dtype=torch.long), memory=torch.zeros(1, 3, 32),
               memory_mask=torch.ones(1, 3, dtype=torch.bool))  # the shapes that fit still run


@pytest.mark.parametrize("batch,max_len,name", [(-1, 4, "batch"), (0, 4, "batch"), (1.5, 4, "batch"),
                                                (1, 1.5, "max_len"), (1, 0, "max_len"), (True, 4, "batch")])
def test_new_kv_cache_wants_positive_ints(batch, max_len, name):
    model = wb.build_model(wb.ModelConfig(vocab_size=16, n_layer=1, n_head=2, n_embd=32, seq_len=8))
    with pytest.raises(ValueError, match=f"^{name}="):
        model.new_kv_cache(batch=batch, max_len=max_len)
