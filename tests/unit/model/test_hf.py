"""workbench.hf: latent feedback on Hugging Face causal LMs, offline (tiny random models, float64).

Every model is built from a config, perturbed off its init, saved with ``save_pretrained`` and
reloaded from a temporary directory through ``FeedbackLM.from_pretrained`` — nothing is downloaded.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

import workbench as wb
from workbench import hf
from workbench.analysis import run_with_cache

S = wb.schedules
ATOL = 1e-11
V = 23
FAMILIES = ("gpt2", "llama")
# Exactness needs float64 all the way: Llama's *eager* attention takes its softmax in float32 (by
# design in transformers), so Llama runs SDPA here, which stays in float64 on the CPU.
ATTN = {"gpt2": "eager", "llama": "sdpa"}


def hf_config(family: str) -> GPT2Config | LlamaConfig:
    """A tiny config with every dropout off; Llama with grouped-query attention."""
    if family == "gpt2":
        return GPT2Config(vocab_size=V, n_positions=64, n_embd=16, n_layer=3, n_head=2, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    return LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.0,
                       bos_token_id=None, eos_token_id=None, pad_token_id=None)


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, str]:
    """One saved HF model directory per family, every weight moved off its init (zero inits hide bugs)."""
    dirs = {}
    for family in FAMILIES:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(hf_config(family), attn_implementation="eager")
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.3)
        path = tmp_path_factory.mktemp(family)
        model.double().save_pretrained(path)
        dirs[family] = str(path)
    return dirs


def load(hf_dirs: dict[str, str], family: str, attn: str | None = None, **options) -> hf.FeedbackLM:
    torch.manual_seed(1)  # fresh fusion weights are drawn at construction
    model = hf.FeedbackLM.from_pretrained(hf_dirs[family], dtype=torch.float64,
                                          attn_implementation=attn or ATTN[family], **options)
    return model.eval()


def tokens(batch: int = 2, length: int = 7, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


VARIANTS = {
    "fbt": {},
    "fbt_residual": dict(inject="residual", gamma_init=0.5),
    "residual_mid_layer": dict(fusion=None, inject="residual", gamma_init=0.5, feedback_layer=2),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_memory_is_the_final_normed_hidden_state(hf_dirs, family):
    """The fed-back state is hidden_states[-1]: after the final norm (GPT-2 ln_f, Llama norm), not the top."""
    model, idx = load(hf_dirs, family), tokens()
    out = model.step(idx)
    ref = model.hf(input_ids=idx, output_hidden_states=True)
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.hidden_states[-1], rtol=0, atol=ATOL)
    final_norm = model.hf.transformer.ln_f if family == "gpt2" else model.hf.model.norm
    torch.testing.assert_close(out.memory, final_norm(out.top), rtol=0, atol=ATOL)
    assert (out.memory - out.top).abs().max() > 1e-3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("family", FAMILIES)
def test_multipass_T_equals_sequential(hf_dirs, family, variant):
    model, idx = load(hf_dirs, family, **VARIANTS[variant]), tokens()
    ref = S.Sequential().run(model, idx)
    out = S.Multipass(idx.size(1)).run(model, idx)
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)
    assert (S.Multipass(2).run(model, idx).logits - ref.logits).abs().max() > 1e-6  # the test can fail


@pytest.mark.parametrize(("family", "attn"), [("gpt2", "eager"), ("gpt2", "sdpa"), ("llama", "sdpa")])
def test_interleaved_T_equals_sequential(hf_dirs, family, attn):
    """HF attention writes into the workbench KVBuffer; a position-aware 4-D mask keeps it causal."""
    model, idx = load(hf_dirs, family, attn, inject="residual", gamma_init=0.5), tokens()
    ref = S.Sequential().run(model, idx)
    out = S.Interleaved(idx.size(1)).run(model, idx)
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL)
    torch.testing.assert_close(out.memory, ref.memory, rtol=0, atol=ATOL)
    assert (S.Interleaved(2).run(model, idx).logits - ref.logits).abs().max() > 1e-6


@pytest.mark.parametrize("family", FAMILIES)
def test_residual_injection_starts_as_the_hf_model(hf_dirs, family):
    model, idx = load(hf_dirs, family, fusion=None, inject="residual"), tokens()
    torch.testing.assert_close(S.Multipass(3).run(model, idx).logits, model.hf(input_ids=idx).logits,
                               rtol=0, atol=ATOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_regimes_match_the_sequential_schedule(hf_dirs, family):
    model, prompt = load(hf_dirs, family), tokens(length=4)
    P, new = prompt.size(1), 5
    for regime, plain_prefix, extra in (("soft", P, {}), ("fused", 0, dict(prefill_passes=P - 1))):
        out, logits = wb.generate(model, prompt, new, regime=regime, return_logits=True, **extra)
        assert out.shape == (2, P + new) and torch.equal(out[:, :P], prompt)
        ref = S.Sequential().run(model, out, plain_prefix).logits[:, P - 1:-1]
        torch.testing.assert_close(logits, ref, rtol=0, atol=ATOL)
        torch.testing.assert_close(out[:, P:], ref.argmax(-1), rtol=0, atol=0)
    out, logits = wb.generate(model, prompt, new, regime="standard", return_logits=True)
    torch.testing.assert_close(logits, model.hf(input_ids=out).logits[:, P - 1:-1], rtol=0, atol=ATOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_takes_hugging_face_arguments(hf_dirs, family):
    """``model.generate``: greedy under SOFT is the feedback recurrence; under STANDARD it is the HF model's own
    greedy ``generate``; sampling is reproducible from its generator; a sampling temperature of 0 is refused."""
    model, prompt = load(hf_dirs, family), tokens(length=4)
    P, new = prompt.size(1), 5
    out = model.generate(prompt, max_new_tokens=new)
    assert out.shape == (2, P + new) and torch.equal(out[:, :P], prompt)
    assert torch.equal(out[:, P:], S.Sequential().run(model, out, P).logits[:, P - 1:-1].argmax(-1))
    plain = model.generate(prompt, max_new_tokens=new, regime="standard")
    hf_greedy = model.hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                                  min_new_tokens=new, do_sample=False, pad_token_id=0)
    assert torch.equal(plain, hf_greedy) and not torch.equal(plain, out)
    sampled = [model.generate(prompt, new, do_sample=True, temperature=0.7, top_k=5,
                              generator=torch.Generator().manual_seed(0)) for _ in range(2)]
    assert torch.equal(*sampled)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, new, do_sample=True, temperature=0.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_run_with_cache_reads_every_depth_and_pass(hf_dirs, family):
    model, idx = load(hf_dirs, family), tokens()
    L = model.config.n_layer
    out, cache = run_with_cache(model, idx, wb.schedules.Multipass(3))
    assert cache.n_passes == 3
    assert {"hook_embed", "hook_input", "hook_memory", "hook_final", "blocks.0.hook_resid_pre"} <= set(cache.keys())
    assert cache.accumulated_resid().shape == (L + 1, 2, idx.size(1), 16)
    torch.testing.assert_close(cache["hook_memory"], out.memory, rtol=0, atol=ATOL)
    torch.testing.assert_close(cache["hook_final"], out.memory, rtol=0, atol=ATOL)
    # pass 1 is plain: its depths are the HF model's own hidden states
    ref = model.hf(input_ids=idx, output_hidden_states=True).hidden_states
    for layer in range(L - 1):
        torch.testing.assert_close(cache.pass_(1)[f"blocks.{layer}.hook_resid_post"], ref[layer + 1], rtol=0, atol=ATOL)
    embed_pos = model.hf.transformer.wpe.weight[: idx.size(1)] if family == "gpt2" else 0.0  # added inside GPT-2
    torch.testing.assert_close(cache.pass_(1)["hook_input"] + embed_pos, ref[0], rtol=0, atol=ATOL)
    _, seq = run_with_cache(model, idx, schedule="sequential", names_filter="hook_memory")
    torch.testing.assert_close(seq["hook_memory"], S.Sequential().run(model, idx).memory, rtol=0, atol=ATOL)


def test_contraction_analysis_runs_on_the_wrapper(hf_dirs):
    """pass_dynamics reaches the sequential fixed point by pass T; the Jacobian of one feedback step,
    taken through the single-token frozen-prefix store, matches autograd on a copied cache."""
    fixed_point = pytest.importorskip("workbench.analysis.fixed_point")
    jacobians = pytest.importorskip("workbench.analysis.jacobians")
    model, idx = load(hf_dirs, "llama", inject="residual", gamma_init=0.3), tokens(length=6)
    dyn = fixed_point.pass_dynamics(model, idx, passes=7)
    assert dyn["fixed_point_distance"].iloc[5] < 1e-12 < dyn["fixed_point_distance"].iloc[0]
    t = 3
    cache = model.new_kv_cache(2, t + 1)
    with torch.no_grad():
        S.Sequential().prefill(model, idx[:, :t], cache)

    def one_step(memory: torch.Tensor) -> torch.Tensor:
        return model.step(idx[:, t:t + 1], memory=memory[:, None], positions=torch.tensor([t]),
                          kv=copy.deepcopy(cache)).memory[:, 0]

    J = torch.autograd.functional.jacobian(one_step, cache.state)
    expected = torch.stack([torch.linalg.matrix_norm(J[b, :, b], ord=2) for b in range(2)])
    got = jacobians.jacobian_power_iteration(model, idx, t, iters=100)["per_example"]
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)


def test_a_rewound_cache_recomputes_exactly(hf_dirs):
    """``rewind`` forgets the later positions, as with ``KVCache`` (probes rely on it)."""
    model, idx = load(hf_dirs, "llama"), tokens()
    ref = S.Sequential().run(model, idx)
    cache = model.new_kv_cache(2, idx.size(1))
    plain = model.step(idx, kv=cache)
    cache.rewind(2)
    state = plain.memory[:, 1]
    for t in range(2, idx.size(1)):
        out = model.step(idx[:, t:t + 1], memory=state[:, None], positions=torch.tensor([t]), kv=cache)
        state = out.memory[:, -1]
    torch.testing.assert_close(out.logits[:, -1], S.Sequential().run(model, idx, 2).logits[:, -1],
                               rtol=0, atol=ATOL)
    assert (out.logits[:, -1] - ref.logits[:, -1]).abs().max() > 1e-6


def test_probe_layers_accepts_the_wrapper():
    probes = pytest.importorskip("workbench.analysis.probes")
    task = wb.tasks.get("delayed_memory")
    batch = task.sample(n=16, seed=0)
    cfg = hf_config("llama")
    cfg.vocab_size = task.vocab_size
    cfg.max_position_embeddings = batch.tokens.size(1)
    torch.manual_seed(0)
    model = hf.FeedbackLM(AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")).double()
    conditions = ("standard", "suffix2")  # suffix2: the plain pass's cache rewound, the last 2 tokens fused
    frame = probes.probe_layers(model, batch, conditions, random_baseline=False, control=False, folds=2, max_iter=100)
    assert len(frame) == 2 * (model.config.n_layer + 1)
    feats = wb.analysis.condition_features(model, batch, conditions)["suffix2"]
    pos = int(batch.label_positions[0])
    _, cache = run_with_cache(model.eval(), batch.tokens[:1, :pos + 1], "sequential", plain_prefix=pos - 1)
    torch.testing.assert_close(feats[:, 0], cache.accumulated_resid()[:, 0, -1], rtol=0, atol=ATOL)


def test_random_init_twin(hf_dirs):
    """The random-network baseline: same shapes and options, the HF model's own init, reproducible by seed."""
    model, idx = load(hf_dirs, "gpt2", inject="residual"), tokens()
    twin, again = model.random_init(seed=3), model.random_init(seed=3)
    assert twin.config == model.config and not twin.training
    torch.testing.assert_close(twin.step(idx).logits, again.step(idx).logits, rtol=0, atol=0)
    assert (twin.step(idx).logits - model.step(idx).logits).abs().max() > 1e-3


def test_hook_points_intervene(hf_dirs):
    """A hook that returns a tensor replaces the activation downstream, as in ``GPT``."""
    model, idx = load(hf_dirs, "llama"), tokens()
    plain = model.step(idx)
    with wb.with_hooks(model, {"blocks.0.hook_resid_post": lambda x, hook: torch.zeros_like(x)}):
        assert (model.step(idx).logits - plain.logits).abs().max() > 1e-3
    with wb.with_hooks(model, {"hook_final": lambda x, hook: 2 * x}):
        doubled = model.step(idx)
    torch.testing.assert_close(doubled.memory, 2 * plain.memory, rtol=0, atol=ATOL)  # the memory is read after it
    torch.testing.assert_close(doubled.logits, 2 * plain.logits, rtol=0, atol=ATOL)  # Llama's lm_head has no bias


def test_save_and_reload_the_wrapper(hf_dirs, tmp_path):
    model, idx = load(hf_dirs, "gpt2", inject="residual", gamma_init=0.3, feedback_layer=-1), tokens()
    with torch.no_grad():
        model.mechanism.injection.alpha.mul_(1.5)
    model.save_pretrained(tmp_path / "saved")
    again = hf.FeedbackLM.from_pretrained(tmp_path / "saved", attn_implementation=ATTN["gpt2"]).eval()
    assert again.config == model.config
    torch.testing.assert_close(S.Multipass(3).run(again, idx).logits, S.Multipass(3).run(model, idx).logits,
                               rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match="disagree"):
        hf.FeedbackLM.from_pretrained(tmp_path / "saved", inject=None)


def test_a_deep_copy_is_independent(hf_dirs):
    """The layer hooks follow the copy (they are bound methods), so the copy's injection and hooks are its own."""
    model, idx = load(hf_dirs, "llama", fusion=None, inject="residual", gamma_init=0.5), tokens()
    twin = copy.deepcopy(model)
    with torch.no_grad():
        model.mechanism.injection.gamma.zero_()
    torch.testing.assert_close(S.Multipass(3).run(model, idx).logits, model.hf(input_ids=idx).logits,
                               rtol=0, atol=ATOL)
    assert (S.Multipass(3).run(twin, idx).logits - model.hf(input_ids=idx).logits).abs().max() > 1e-3
    torch.testing.assert_close(S.Multipass(7).run(twin, idx).logits, S.Sequential().run(twin, idx).logits,
                               rtol=0, atol=ATOL)


def test_pickled_weights_are_refused_before_anything_is_unpickled(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(hf_config("gpt2"))
    model.config.save_pretrained(tmp_path)  # what an old or foreign directory holds: a config and a pickle
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # written here, never read back
    with pytest.raises(ValueError, match=r"\['pytorch_model\.bin'\]"):
        hf.FeedbackLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="use_safetensors"):
        hf.FeedbackLM.from_pretrained(tmp_path, use_safetensors=False)


def test_bad_input_is_refused_clearly(hf_dirs):
    model, idx = load(hf_dirs, "llama"), tokens()
    for options, field in ((dict(fusion="mlp"), "fusion"), (dict(feedback_layer=0), "feedback_layer"),
                           (dict(feedback_layer=4), "feedback_layer"), (dict(fusion=None), "fusion=None"),
                           (dict(inject="kv"), "inject")):
        with pytest.raises(ValueError, match=field):
            hf.FeedbackLM(model.hf, **options)
    with pytest.raises(TypeError, match="HFKVCache"):
        model.step(idx, kv=object())
    with pytest.raises(ValueError, match="idx"):
        model.step(torch.full_like(idx, V))  # one past the vocabulary: refused before the HF embedding indexes it
    with pytest.raises(ValueError, match="positions"):
        model.step(idx, positions=torch.arange(idx.size(1) + 1))
    with pytest.raises(ValueError, match="memory"):
        model.step(idx, memory=torch.zeros(idx.size(0), idx.size(1), model.config.n_embd + 1, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="KVCache"):
        model.step(idx, kv=wb.kv_cache.KVCache(3, 2, 2, 8, 4))
    cache = model.new_kv_cache(2, 8)
    with pytest.raises(ValueError, match=r"positions.*\[1, 2\]"):
        model.step(idx[:, :2], positions=torch.tensor([1, 2]), kv=cache)
    with pytest.raises(ValueError, match="full"):
        model.step(tokens(length=9), kv=cache)
    with pytest.raises(ValueError, match="Linear.*num_hidden_layers=3"):
        hf.decoder_layers(torch.nn.Linear(2, 2), 3)


@pytest.mark.parametrize("options,name", [(dict(jitter="0.1"), "jitter"), (dict(jitter=True), "jitter"),
                                          (dict(gamma_init="0"), "gamma_init")])
def test_constructor_arguments_are_checked_by_type_and_range(hf_dirs, options, name):
    """jitter="0.1" used to fail comparing a str with a float (TypeError), and jitter=True passed as 1.0: the numeric
    options are checked for type as well as range, and refused by name."""
    hf_model = load(hf_dirs, "gpt2").hf
    with pytest.raises(ValueError, match=f"^{name}="):
        hf.FeedbackLM(hf_model, **options)


def test_the_wrapper_names_a_bad_model_cache_size_and_memory_mask(hf_dirs):
    with pytest.raises(ValueError, match="^hf_model=NoneType"):
        hf.FeedbackLM(None)  # was: AttributeError on .config
    model, idx = load(hf_dirs, "gpt2"), tokens()
    for batch, max_len, name in ((-1, 8, "batch"), (1, 1.5, "max_len")):
        with pytest.raises(ValueError, match=f"^{name}="):
            model.new_kv_cache(batch, max_len)
    memory = torch.zeros(*idx.shape, model.config.n_embd, dtype=torch.float64)
    with pytest.raises(ValueError, match="^memory_mask must be"):
        model.step(idx, memory=memory, memory_mask=torch.ones(idx.size(0), idx.size(1) - 1, dtype=torch.bool))


def test_an_embedding_narrower_than_the_hidden_states_is_refused():
    """OPT-350m's shape: inputs_embeds of width 8 projected to hidden states of 16. FBT and LRT fuse and inject
    the memory at the width it is read, so the wrapper refuses the model by name."""
    from transformers import OPTConfig

    cfg = OPTConfig(vocab_size=V, hidden_size=16, word_embed_proj_dim=8, num_hidden_layers=1, ffn_dim=32,
                    num_attention_heads=2, max_position_embeddings=16)
    with pytest.raises(ValueError, match="hf_model"):
        hf.FeedbackLM(AutoModelForCausalLM.from_config(cfg))


def test_multipass_training_lowers_the_loss(hf_dirs):
    """The trainer's recipe (2 passes, prefix mix-in, jitter) with AdamW on a toy task with a latent state."""
    model = load(hf_dirs, "llama").float().train()
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, V, (16, 10), generator=g)
    targets = idx.cumsum(dim=1) % V  # running sum mod V: the state a position carries forward
    prefix = torch.randint(0, 10, (16,), generator=g)
    assert S.Multipass(2).flops(model, 16, 10) == 2 * model.flops_per_token(10) * 16 * 10
    groups = model.parameter_groups()  # what the trainer's optimisers are built from: every parameter once
    assert sorted(id(p) for g in groups.values() for p in g) == sorted(id(p) for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(12):
        loss = S.Multipass(2).run(model, idx, prefix).loss(targets)
        opt.zero_grad()
        loss.backward()
        assert model.mechanism.fusion.W_U.weight.grad.abs().sum() > 0  # gradients reach the fusion through pass 2
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_positions_past_a_learned_position_table_are_refused_by_name(hf_dirs):
    """GPT-2's wpe has n_positions rows: past them the HF model fails with a bare IndexError. Llama's rotary
    positions have no table, so the same positions are computed."""
    idx = tokens()
    past = torch.arange(60, 60 + idx.size(1))  # reaches 64 = n_positions
    with pytest.raises(ValueError, match="positions.*max_position_embeddings=64"):
        load(hf_dirs, "gpt2").step(idx, positions=past)
    assert torch.isfinite(load(hf_dirs, "llama").step(idx, positions=past).logits).all()
    load(hf_dirs, "gpt2").step(idx, positions=past - 4)  # the last row, 63, is in the table


def test_the_trainer_trains_a_given_wrapper_in_place(hf_dirs, tmp_path):
    """``wb.train(cfg, model=FeedbackLM)``: the trainer's loop, schedule and held-out evaluation on the wrapper,
    trained in place; what a workbench checkpoint cannot hold is refused by the parameter's name."""
    task = wb.tasks.get("running_sum", p=5, length=8)
    config = GPT2Config(vocab_size=task.vocab_size, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    model = hf.FeedbackLM(AutoModelForCausalLM.from_config(config)).float()
    small = load(hf_dirs, "gpt2")  # vocab V: fewer ids than the task's
    cfg = wb.TrainConfig(task="running_sum", task_params={"p": 5, "length": 8}, schedule=wb.schedules.Multipass(2),
                         steps=30, batch_size=16, optimizer="adamw", lr=3e-3, eval_every=0, eval_size=64,
                         progress=False)
    batch = task.sample(64, seed=cfg.eval_seed, split="val")
    before = wb.evaluation.summarize(wb.evaluation.per_example_metrics(model, batch, S.Multipass(2)))["loss"]
    fusion = model.mechanism.fusion.W_U.weight.detach().clone()
    result = wb.train(cfg, model=model)
    assert result.model is model and not model.training
    assert not torch.equal(model.mechanism.fusion.W_U.weight, fusion)  # gradients reached the fusion
    assert {"loss_pass1", "loss_pass2"} <= set(result.history.columns)
    assert result.metrics["val_loss"] < before - 0.5, (before, result.metrics["val_loss"])
    for changes, name in ((dict(out_dir=str(tmp_path / "run")), "out_dir"), (dict(model={"n_layer": 2}), "model"),
                          (dict(init_from=str(tmp_path)), "init_from")):
        with pytest.raises(ValueError, match=f"TrainConfig.{name}="):
            wb.train(cfg.replace(**changes), model=model)
    with pytest.raises(ValueError, match="model.*running_sum"):
        wb.train(cfg, model=small)
    with pytest.raises(ValueError, match="model="):
        wb.train(cfg, model=torch.nn.Linear(2, 2))
