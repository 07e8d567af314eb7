"""The slips of notebooks 04' later exercises: each row (check, the reference solution written with a
slip switch, the switch, a phrase the check's message must say), merged into test_exercises.SLIPS."""

from __future__ import annotations

import torch

import exercises as ex


def soft_logits(model, idx, prompt_len, *, plain_prompt=True, first_reads=True, carry=True, pass_positions=True):
    """SOFT decoding's logits by hand, with a switch per slip: the prompt run as a recurrence, the first token after
    it reading nothing, the prompt's memory read at every step, the steps not told their positions."""
    cache = model.new_kv_cache(idx.size(0), idx.size(1))
    if plain_prompt:
        out = model.step(idx[:, :prompt_len], kv=cache)
        logits, memory = [out.logits], out.memory[:, -1:]
    else:  # the prompt token by token, every token reading its predecessor's memory
        logits, memory = [], None
        for t in range(prompt_len):
            out = model.step(idx[:, t:t + 1], memory=memory, positions=torch.tensor([t]), kv=cache)
            logits.append(out.logits)
            memory = out.memory
    prompt_memory = memory
    memory = memory if first_reads else None
    for t in range(prompt_len, idx.size(1)):
        out = model.step(idx[:, t:t + 1], memory=memory, positions=torch.tensor([t]) if pass_positions else None,
                         kv=cache)
        logits.append(out.logits)
        memory = out.memory if carry else prompt_memory
    return torch.cat(logits, dim=1)


SLIPS: dict[str, tuple] = {
    "soft: the prompt fed back": (ex.check_soft_logits, soft_logits, dict(plain_prompt=False), "one plain pass"),
    "soft: the first token reads nothing": (ex.check_soft_logits, soft_logits, dict(first_reads=False),
                                            "first token after the prompt read no memory"),
    "soft: the prompt's memory every step": (ex.check_soft_logits, soft_logits, dict(carry=False),
                                             "not the prompt's again"),
    "soft: no positions": (ex.check_soft_logits, soft_logits, dict(pass_positions=False), "must be told where it is"),
}
