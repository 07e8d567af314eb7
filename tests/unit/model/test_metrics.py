"""Metrics: exact bits per byte, per-position loss, teacher-forced answer accuracy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import workbench.tasks as tasks
from workbench.metrics import answer_accuracy, bits_per_byte, per_position_loss, token_losses

torch.set_num_threads(1)


def test_uniform_byte_model_has_exactly_8_bits_per_byte() -> None:
    targets = torch.randint(0, 256, (4, 9))
    targets[0, :3] = -1
    uniform = torch.zeros(4, 9, 256, dtype=torch.float64)
    assert bits_per_byte(uniform, targets) == pytest.approx(8.0, abs=1e-12)
    assert bits_per_byte(torch.zeros(4, 9, 256), targets) == pytest.approx(8.0, abs=1e-6)  # float32
    # over the byte vocabulary: specials get no mass, and special targets count in neither sum
    tok = tasks.ByteTokenizer()
    logits = torch.zeros(4, 9, tok.vocab_size, dtype=torch.float64)
    logits[..., 256:] = -math.inf
    with_bos = targets.clone()
    with_bos[1, 4] = tok.bos_id
    assert bits_per_byte(logits, with_bos, tok.token_bytes) == pytest.approx(8.0, abs=1e-12)


def test_bits_per_byte_counts_bytes_per_token() -> None:
    logits = torch.randn(2, 5, 6, dtype=torch.float64)
    targets = torch.tensor([[0, 1, 2, 3, -1], [4, 5, 0, -1, -1]])
    nats = -torch.log_softmax(logits, -1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    token_bytes = torch.tensor([1, 2, 3, 1, 2, 0])
    mask = (targets >= 0) & (token_bytes[targets.clamp(min=0)] > 0)
    n_bytes = token_bytes[targets.clamp(min=0)][mask].sum()
    expected = nats[mask].sum() / math.log(2) / n_bytes
    assert bits_per_byte(logits, targets, token_bytes) == pytest.approx(float(expected), rel=1e-6)
    with pytest.raises(ValueError, match="target"):
        bits_per_byte(logits, torch.full_like(targets, -1))


def test_per_position_loss() -> None:
    logits = torch.randn(3, 4, 5)
    targets = torch.tensor([[1, -1, 2, -1], [3, -1, 0, -1], [4, 1, -1, -1]])
    losses = token_losses(logits, targets)
    assert (losses[targets < 0] == 0).all()
    per_pos = per_position_loss(logits, targets)
    assert per_pos[0] == pytest.approx(losses[:, 0].mean().item(), rel=1e-6)
    assert per_pos[1] == pytest.approx(losses[2, 1].item(), rel=1e-6)
    assert per_pos[2] == pytest.approx(losses[:2, 2].mean().item(), rel=1e-6)
    assert torch.isnan(per_pos[3])
    with pytest.raises(ValueError, match="logits.*targets"):
        token_losses(logits, targets[:, :3])


def test_answer_accuracy_on_a_probe_batch() -> None:
    task = tasks.get("completion_tracking", loss_on="all")
    batch = task.sample(8, seed=0)
    perfect = torch.nn.functional.one_hot(batch.targets.clamp(min=0), task.vocab_size).float()
    assert answer_accuracy(perfect, batch.targets, batch.label_positions) == 1.0
    wrong = perfect.clone()
    wrong[0, batch.label_positions[0] + 1] = 0  # example 0 gets its label's first character wrong
    wrong[1, 0] = 0  # example 1 errs before the answer span only
    assert answer_accuracy(wrong, batch.targets, batch.label_positions) == 7 / 8
    assert answer_accuracy(wrong, batch.targets) == 6 / 8


def test_bits_per_byte_over_eval_batches_matches_one_pass(tmp_path: Path) -> None:
    for i in range(6):
        (tmp_path / f"f{i}.txt").write_text(f"line {i}\n" * (i + 3))
    task = tasks.get("text", path=str(tmp_path), seq_len=7, val_fraction=0.5)
    table = torch.randn(task.vocab_size, task.vocab_size, dtype=torch.float64)  # a bigram model

    def total_bits(batch: tasks.Batch) -> float:
        return bits_per_byte(table[batch.tokens], batch.targets) * int(batch.mask.sum())

    batches = list(task.eval_batches("val", batch_size=2))
    n_bytes = sum(int(b.mask.sum()) for b in batches)
    one = next(iter(task.eval_batches("val", batch_size=10_000)))
    expected = bits_per_byte(table[one.tokens], one.targets)
    assert sum(total_bits(b) for b in batches) / n_bytes == pytest.approx(expected, rel=1e-12)
