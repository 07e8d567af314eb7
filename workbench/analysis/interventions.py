"""Causal interventions on the feedback channel: patch, zero or mean-ablate the memory a position reads.

A probe shows a label is *decodable* from memory, not *used* (arXiv 2608.08888, appendix F); an edit tells them
apart. Sites are replayed forward by forward: a run patched with its own record is reproduced bit for bit."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from .. import schedules
from ..hooks import with_hooks
from ..mechanisms import MECHANISM_CLASSES
from ..metrics import token_losses
from ..model import GPT, eval_mode
from ..validation import check_choice, check_int, check_tokens, fail

KINDS = ("patch", "zero", "mean")
EditFn = Callable[..., "torch.Tensor | None"]


# ------------------------------------------------------------------------------------------ sites
def _site_hooks(model: GPT) -> dict[str, str]:
    """Every site of a model with the hook point it edits."""
    mechanism = MECHANISM_CLASSES[model.config.mechanism]
    return {"memory": "hook_memory_in", **mechanism.sites(model.config.n_layer)}


def site_hook_name(model: GPT, site: str) -> str:
    """The hook point a site edits."""
    hooks = _site_hooks(model)
    if isinstance(site, str) and site in hooks:
        return hooks[site]
    raise ValueError(f"site={site!r} is invalid for {model.config.mechanism!r}: must be one of {list(hooks)}")


def sites(model: GPT) -> list[str]:
    """Every site of a model: ``memory``, then ``input`` (FBT) or ``inject0..`` (LRT)."""
    return list(_site_hooks(model))


@dataclass(frozen=True)
class FeedbackHook:
    """An edit function's ``hook``: where in the run its tensor sits."""

    site: str
    name: str  # the hook point's name
    forward: int  # index of this forward among the run's forwards that read memory (0-based)
    positions: torch.Tensor  # (Tc,) absolute positions of the tensor's position dimension


class _Tracker:
    """Follows a run's forwards: their positions, and whether each reads memory."""

    def __init__(self) -> None:
        self.positions = torch.empty(0, dtype=torch.long)
        self.forward = -1
        self.reading = False

    def on_positions(self, positions: torch.Tensor, hook) -> None:
        self.positions, self.reading = positions.detach().cpu(), False

    def on_memory(self, memory: torch.Tensor, hook) -> None:
        self.reading = True
        self.forward += 1


@contextmanager
def feedback_hooks(model: GPT, fwd_hooks: Mapping[str, EditFn] | Sequence[tuple[str, EditFn]]) -> Iterator[None]:
    """Attach edits ``fn(tensor, *, hook: FeedbackHook)`` to sites, called only in forwards that read memory."""
    tracker = _Tracker()
    items = list(fwd_hooks.items() if isinstance(fwd_hooks, Mapping) else fwd_hooks)
    named = [(site, site_hook_name(model, site), fn) for site, fn in items]

    def wrap(site: str, name: str, fn: EditFn) -> Callable:
        def call(tensor: torch.Tensor, hook) -> torch.Tensor | None:
            if not tracker.reading:
                return None
            return fn(tensor, hook=FeedbackHook(site, name, tracker.forward, tracker.positions))
        return call

    wired = [("hook_positions", tracker.on_positions), ("hook_memory_in", tracker.on_memory)]
    with with_hooks(model, wired + [(name, wrap(site, name, fn)) for site, name, fn in named]):
        yield


# ------------------------------------------------------------------------------------------ runs
def run_schedule(schedule: str | schedules.Schedule = "sequential", regime: str | None = None,
                 prompt_len: int | None = None, prefill_passes: int = 1, T: int | None = None) -> schedules.Schedule:
    """``schedule``, or the decoding ``regime`` teacher-forced on a ``prompt_len``-token prompt."""
    if regime is None:
        return schedules.parse(schedule)
    if regime not in schedules.REGIMES:
        fail("regime", regime, f"must be None or one of {schedules.REGIMES}")
    if prompt_len is None:
        raise ValueError("prompt_len is required with a regime")
    if T is not None:
        check_int("prompt_len", prompt_len, 1, T)
    return schedules.regime(regime, prefill_passes, prompt_len)


def run_logits(model: GPT, idx: torch.Tensor, *, schedule: str | schedules.Schedule = "sequential",
               regime: str | None = None,
               prompt_len: int | None = None, prefill_passes: int = 1, plain_prefix: int | torch.Tensor = 0
               ) -> torch.Tensor:
    """Logits (B, T, V) of ``idx`` under a schedule, or teacher-forced under a decoding ``regime``."""
    check_tokens(model.config.vocab_size, idx)
    value = run_schedule(schedule, regime, prompt_len, prefill_passes, idx.size(1))
    with eval_mode(model), torch.no_grad():
        return value.run(model, idx, plain_prefix).logits


def reads_memory(idx: torch.Tensor, *, schedule: str | schedules.Schedule = "sequential", regime: str | None = None,
                 prompt_len: int | None = None, prefill_passes: int = 1, plain_prefix: int | torch.Tensor = 0
                 ) -> torch.Tensor:
    """(B, T) bool: what reads memory in a run's final result; takes ``run_logits``' keywords."""
    B, T = idx.shape
    value = run_schedule(schedule, regime, prompt_len, prefill_passes, T)
    return value.reads(B, T, plain_prefix, idx.device)


# ------------------------------------------------------------------------------------------ records
@dataclass
class SiteRecord:
    """A site's values in one run, forward by forward."""

    site: str
    positions: list[torch.Tensor] = field(default_factory=list)  # per forward: (Tc,) absolute positions
    values: list[torch.Tensor] = field(default_factory=list)  # per forward: (B, Tc, D)
    reads: torch.Tensor | None = None  # (B, T) bool: rows x positions that read memory
    logits: torch.Tensor | None = None  # (B, T, V) the run's logits

    def means(self, forward: int) -> torch.Tensor:
        """(Tc, D) mean over the rows that read memory (0 where none do)."""
        reads = self.reads[:, self.positions[forward].to(self.reads.device)].to(self.values[forward])
        total = (self.values[forward] * reads[..., None]).sum(0)
        return total / reads.sum(0).clamp(min=1)[:, None]


def record_site(model: GPT, idx: torch.Tensor, site: str = "memory", **run: Any) -> SiteRecord:
    """Run ``idx`` and keep ``site``'s value in every forward that reads memory."""
    record = SiteRecord(site, reads=reads_memory(idx, **run))

    def keep(tensor: torch.Tensor, *, hook: FeedbackHook) -> None:
        record.positions.append(hook.positions)
        record.values.append(tensor.detach().clone())

    with feedback_hooks(model, {site: keep}):
        record.logits = run_logits(model, idx, **run)
    return record


@dataclass(frozen=True)
class Intervention:
    """One edit of a site; ``patch``: row i takes row ``rows[i]`` (default i) of the run on ``source`` (default:
    this batch)."""

    kind: str
    rows: torch.Tensor | None = None  # (B,) long
    source: torch.Tensor | None = None  # (B', T) tokens of the source run

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            fail("kind", self.kind, f"must be one of {KINDS}")
        if self.kind == "patch" and self.rows is None and self.source is None:
            raise ValueError("a patch needs rows or source")
        if self.kind != "patch" and (self.rows is not None or self.source is not None):
            raise ValueError(f"rows and source belong to kind='patch', not kind={self.kind!r}")


def edit_function(intervention: Intervention, where: torch.Tensor, record: SiteRecord) -> EditFn:
    """The edit applying ``intervention`` where ``where`` (B, T) is set, replaying ``record``."""
    kind = intervention.kind
    rows = intervention.rows

    def edit(tensor: torch.Tensor, *, hook: FeedbackHook) -> torch.Tensor | None:
        mask = where[:, hook.positions.to(where.device)]
        if not bool(mask.any()):
            return None
        if kind == "zero":
            replacement = torch.zeros_like(tensor)
        else:
            if hook.forward >= len(record.values) or not torch.equal(record.positions[hook.forward], hook.positions):
                raise ValueError(f"the {kind} record does not match this run at forward {hook.forward}")
            if kind == "mean":
                replacement = record.means(hook.forward)[None].expand_as(tensor)
            else:
                source = record.values[hook.forward]
                replacement = source if rows is None else source[rows.to(source.device)]
        return torch.where(mask[..., None].to(tensor.device), replacement.to(tensor), tensor)

    return edit


def _where(B: int, T: int, positions: torch.Tensor | int | None, reads: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: ``positions`` (one per row; None: all) that also read memory."""
    if positions is None:
        return reads.clone()
    chosen = torch.zeros(B, T, dtype=torch.bool, device=reads.device)
    chosen[torch.arange(B), torch.as_tensor(positions, device=reads.device).expand(B)] = True
    return chosen & reads


def intervene(model: GPT, idx: torch.Tensor, intervention: Intervention, positions: int | torch.Tensor | None,
              site: str = "memory", clean: SiteRecord | None = None, **run: Any) -> torch.Tensor:
    """Logits with ``site`` edited at ``positions`` (None: wherever memory is read) in every forward."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    if positions is not None:
        allowed = f"must be None, an int or ({B},) ints in [0, {T - 1}]"
        given = positions
        try:  # a float or bool tensor would fail as an index, naming nothing
            positions = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError):
            fail("positions", given, allowed)
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            fail("positions", given, f"{allowed} (got dtype {positions.dtype})")
        if positions.ndim > 1 or (positions.ndim == 1 and len(positions) != B) or bool(
                (positions < 0).any() | (positions >= T).any()):
            fail("positions", positions.tolist(), allowed)
    source, rows = intervention.source, intervention.rows
    if source is not None and (source.ndim != 2 or source.shape[1] != T or (rows is None and len(source) != B)):
        raise ValueError(f"source must be ({B}, {T}) (or (B', {T}) with rows), got {tuple(source.shape)}")
    available = len(idx if source is None else source)
    if rows is not None and (rows.shape != (B,) or bool((rows < 0).any() | (rows >= available).any())):
        raise ValueError(f"rows must be ({B},) indices of source rows, got {rows.tolist()!r}")
    clean = clean if clean is not None else record_site(model, idx, site, **run)
    record = record_site(model, source, site, **run) if source is not None else clean
    where = _where(B, T, positions, clean.reads)
    with feedback_hooks(model, {site: edit_function(intervention, where, record)}):
        return run_logits(model, idx, **run)


# ------------------------------------------------------------------------------------------ effects
def answer_numbers(logits: torch.Tensor, answers: torch.Tensor, foils: torch.Tensor | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per row: logit(answer) - logit(foil, or else the best other token), and the prediction."""
    logits = logits.double()
    rows = torch.arange(len(answers))
    correct = logits[rows, answers]
    if foils is not None:
        other = logits[rows, foils]
        prediction = torch.where(correct >= other, answers, foils)
    else:
        other = logits.scatter(1, answers[:, None], float("-inf")).max(1).values
        prediction = logits.argmax(1)
    return (correct - other).cpu().numpy(), prediction.cpu().numpy()


def intervention_effects(model: GPT, idx: torch.Tensor, positions: int | Sequence[int], answers: torch.Tensor,
                         interventions: Mapping[str, Intervention] | Sequence[str] = ("zero", "mean"), *,
                         foils: torch.Tensor | None = None, answer_positions: int | torch.Tensor | None = None,
                         site: str = "memory", per_example: bool = False, **run: Any) -> pd.DataFrame:
    """How each intervention at each position (None: the whole stream, as -1) moves ``answers`` against ``foils``."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    named = {k: Intervention(k) for k in interventions} if not isinstance(interventions, Mapping) \
        else dict(interventions)
    if not named:
        raise ValueError("interventions is empty")
    wanted = [positions] if positions is None or isinstance(positions, (int, np.integer)) else list(positions)
    if not wanted:
        raise ValueError("positions is empty")
    for p in wanted:
        if p is not None:
            check_int("positions", p, 0, T - 1)
    for name, tokens in (("answers", answers), ("foils", foils)):
        if tokens is not None and tuple(tokens.shape) != (B,):
            raise ValueError(f"{name} must have shape ({B},), got {tuple(tokens.shape)}")
    clean = record_site(model, idx, site, **run)
    rows = torch.arange(B)
    frames = []
    for p in wanted:
        if p is None and answer_positions is None:
            raise ValueError("answer_positions is required with positions=None")
        at = torch.as_tensor(p if answer_positions is None else answer_positions).expand(B)
        if bool((at < 0).any() | (at >= T).any()):
            raise ValueError(f"answer_positions must lie in [0, {T - 1}]")
        before, predicted = answer_numbers(clean.logits[rows, at], answers, foils)
        for name, intervention in named.items():
            logits = intervene(model, idx, intervention, p, site, clean, **run)
            after, now = answer_numbers(logits[rows, at], answers, foils)
            frames.append(pd.DataFrame({
                "example": np.arange(B), "site": site, "position": -1 if p is None else p, "intervention": name,
                "answer_position": at.numpy(), "logit_diff_clean": before, "logit_diff": after,
                "logit_diff_change": after - before, "flipped": now != predicted,
                "reads_memory": (clean.reads.any(1) if p is None else clean.reads[rows, p]).cpu().numpy()}))
    frame = pd.concat(frames, ignore_index=True)
    return frame if per_example else summarize_effects(frame)


def summarize_effects(per_example: pd.DataFrame) -> pd.DataFrame:
    """Per (site, position, intervention): ``n``, mean logit differences and ``flip_rate``."""
    keys = ["site", "position", "intervention"]
    return (per_example.groupby(keys, sort=False)
            .agg(n=("example", "size"), logit_diff_clean=("logit_diff_clean", "mean"),
                 logit_diff=("logit_diff", "mean"), logit_diff_change=("logit_diff_change", "mean"),
                 flip_rate=("flipped", "mean"))
            .reset_index())


# ------------------------------------------------------------------------------------------ distance
def ablation_by_distance(model: GPT, idx: torch.Tensor, max_distance: int, *, targets: torch.Tensor | None = None,
                         positions: Sequence[int] | None = None, kind: str = "mean", site: str = "memory",
                         batch_size: int = 2048, **run: Any) -> pd.DataFrame:
    """How far back the state matters: loss ``increase`` (nats) at ``r + d - 1`` when the memory read at r is
    ablated."""
    check_tokens(model.config.vocab_size, idx)
    B, T = idx.shape
    check_int("max_distance", max_distance, 1, T)
    check_int("batch_size", batch_size, 1)
    check_choice("kind", kind, ("zero", "mean"))
    targets = torch.nn.functional.pad(idx[:, 1:], (0, 1), value=-1) if targets is None else targets
    if targets.shape != idx.shape:
        raise ValueError(f"targets must have shape {tuple(idx.shape)}, got {tuple(targets.shape)}")
    clean = record_site(model, idx, site, **run)
    wanted = (clean.reads[0].nonzero().squeeze(1).tolist() if positions is None else list(positions))
    for r in wanted:
        check_int("positions", r, 0, T - 1)
    base = token_losses(clean.logits.double(), targets.to(clean.logits.device)).cpu()
    per_run = max(1, batch_size // B)
    frames = []
    for start in range(0, len(wanted), per_run):
        chunk = wanted[start:start + per_run]
        copies = len(chunk)
        tiled = SiteRecord(site, clean.positions, [v.repeat(copies, *[1] * (v.ndim - 1)) for v in clean.values],
                           clean.reads.repeat(copies, 1))
        at = torch.tensor(chunk).repeat_interleave(B)
        big = idx.repeat(copies, 1)
        where = _where(B * copies, T, at, tiled.reads)
        with feedback_hooks(model, {site: edit_function(Intervention(kind), where, tiled)}):
            logits = run_logits(model, big, **run)
        losses = token_losses(logits.double(), targets.repeat(copies, 1).to(logits.device)).cpu().view(copies, B, T)
        for c, r in enumerate(chunk):
            t = np.arange(r, min(r + max_distance, T))
            keep = (targets[:, t] >= 0).cpu().numpy()
            loss, ref = losses[c][:, t].numpy(), base[:, t].numpy()
            ex, col = np.nonzero(keep)
            frames.append(pd.DataFrame({"example": ex, "position": r, "distance": t[col] - r + 1,
                                        "target_position": t[col], "loss_clean": ref[ex, col], "loss": loss[ex, col],
                                        "increase": loss[ex, col] - ref[ex, col]}))
    return pd.concat(frames, ignore_index=True)
