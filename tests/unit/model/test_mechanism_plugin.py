"""A third mechanism is one class: registered from here, it runs under every schedule, decodes, trains, saves,
and offers its own intervention site, with no change to the package.

``Echo`` adds a learned projection of the memory to the input embedding (an additive input injection,
neither paper's): small enough to read, different enough from LRT and FBT to show nothing is special-cased.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import schedules as S
from workbench.analysis import interventions
from workbench.mechanisms import MECHANISM_CLASSES, Feedback, Mechanism, register, unregister

ATOL = 1e-11


class Echo(Mechanism):
    name = "test_echo"
    caption = "memory added to the input embedding (a test's mechanism)"
    overhead_rows = ({},)

    def __init__(self, config: wb.ModelConfig) -> None:
        super().__init__(config)
        self.W = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def init_weights(self) -> None:
        nn.init.normal_(self.W.weight, std=0.02)

    @classmethod
    def constraints(cls, config: wb.ModelConfig) -> list:
        return [] if config.n_layer >= 2 else [("n_layer", config.n_layer, "must be >= 2 for test_echo")]

    @classmethod
    def sites(cls, n_layer: int) -> dict[str, str]:
        return {"echo": "hook_input"}

    def fuse_input(self, embedded: torch.Tensor, feedback: Feedback) -> torch.Tensor:
        memory = feedback.masked_memory()
        return embedded if memory is None else embedded + self.W(memory)


@pytest.fixture
def echo():
    register(Echo)
    yield small_config("test_echo")
    unregister("test_echo")


def _idx(cfg, batch=2, length=9):
    return torch.randint(0, cfg.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))


def test_a_registered_mechanism_is_a_config_value_with_its_own_constraints(echo):
    assert "test_echo" in wb.config.mechanisms() and MECHANISM_CLASSES["test_echo"] is Echo
    with pytest.raises(ValueError, match="n_layer=1.*test_echo"):
        small_config("test_echo", n_layer=1)


def test_it_runs_exactly_under_every_schedule_and_decodes(echo):
    model, idx = perturbed_model(echo), _idx(echo)
    exact = S.Sequential().run(model, idx).logits
    assert (exact - S.Single().run(model, idx).logits).abs().max() > 1e-3  # the memory matters
    for value in (S.Multipass(idx.size(1)), S.Interleaved(idx.size(1))):
        torch.testing.assert_close(value.run(model, idx).logits, exact, rtol=0, atol=ATOL)
    tokens, chosen = wb.generate(model, idx[:, :4], 5, regime="soft", return_logits=True)
    assert torch.equal(S.regime("soft", prompt_len=4).run(model, tokens).logits[:, 3:-1], chosen)


def test_it_trains_and_saves(echo, tmp_path):
    model = wb.build_model(echo).train()
    idx = _idx(echo)
    S.Multipass(3).run(model, idx).loss(torch.roll(idx, -1, 1)).backward()
    assert model.mechanism.W.weight.grad.abs().sum() > 0
    wb.save_checkpoint(model, tmp_path / "ck")
    again = wb.load_checkpoint(tmp_path / "ck")
    assert isinstance(again.mechanism, Echo)
    torch.testing.assert_close(again(idx), model.eval()(idx), rtol=0, atol=0)


def test_its_own_site_is_an_intervention_site(echo):
    model, idx = perturbed_model(echo), _idx(echo)
    assert interventions.sites(model) == ["memory", "echo"]
    assert interventions.site_hook_name(model, "echo") == "hook_input"
    with pytest.raises(ValueError, match="site='input'.*'echo'"):
        interventions.site_hook_name(model, "input")
    clean = interventions.run_logits(model, idx)
    zeroed = interventions.intervene(model, idx, interventions.Intervention("zero"), 4, site="memory")
    assert torch.equal(zeroed[:, :4], clean[:, :4]) and (zeroed[:, 4] - clean[:, 4]).abs().max() > 1e-6


def test_unregistered_it_is_refused_and_the_builtins_cannot_be_removed(echo):
    unregister("test_echo")
    with pytest.raises(ValueError, match="mechanism='test_echo'"):
        small_config("test_echo")
    register(Echo)  # for the fixture to remove
    with pytest.raises(ValueError, match="name='lrt'"):
        unregister("lrt")
