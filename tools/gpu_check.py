"""``make gpu-check``: the CUDA path's checks, prepared to run as one script on a machine with a GPU.

1. float32 invariants (TF32 off, so float32 means float32): ``multipass(T)`` = ``interleaved(T)`` =
   ``sequential`` and ``generate`` = ``sequential``, for every mechanism variant;
2. one training step under bf16 autocast for every mechanism and schedule: finite loss, gradients
   and weights after AdamW;
3. compiled decoding (``generate(compile=True)``) picks eager decoding's tokens;
4. a d12-shaped baseline (nanochat's d12: 12 layers, width 768, 6 heads, vocab 65,536, 2,048
   tokens): training tokens/s eager and compiled, and MFU against the device's datasheet bf16
   peak and against a bf16 matmul measured in the same run (the practical peak).

Without CUDA it says so and exits 0: there is nothing to check. ``--device cpu --quick`` runs the
same checks on the CPU at toy sizes and without compiling (the test suite covers compiled decoding
and training on the CPU elsewhere, and runs this, so the script cannot rot unseen on machines
without a GPU). Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

import workbench as wb
from workbench.schedules import SCHEDULES

# Dense bf16 tensor-core peaks from the vendors' datasheets (FLOP/s), by a substring of the device name.
DATASHEET_BF16_PEAK = {"H200": 989e12, "H100": 989e12, "GH200": 989e12, "A100": 312e12, "L40S": 362e12,
                       "L4": 121e12, "A10G": 70e12, "RTX 4090": 165e12}
VARIANTS = {
    "none": dict(mechanism="none"),
    "lrt shared top": dict(mechanism="lrt", lrt_source_layer=-1),
    "lrt per-layer mid": dict(mechanism="lrt", lrt_source_layer=1, lrt_projection="per_layer"),
    "fbt": dict(mechanism="fbt", tie_embeddings=True),
}
SCHEDULE_VALUES = {"single": wb.schedules.Single(), "sequential": wb.schedules.Sequential(),
                   "multipass": wb.schedules.Multipass(2), "interleaved": wb.schedules.Interleaved(2),
                   "blockwise": wb.schedules.Blockwise(16), "fixed_point": wb.schedules.FixedPoint(4)}


class Report:
    """Prints one line per check and remembers whether any failed."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
        if not ok:
            self.failed.append(name)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def small_model(device: torch.device, seed: int = 0, perturb: float = 0.3, **config) -> wb.GPT:
    """A float32 toy model with every weight moved off its init (zero inits would hide a broken path)."""
    cfg = wb.ModelConfig(**{**dict(vocab_size=97, n_layer=3, n_head=4, n_embd=64, seq_len=32), **config})
    torch.manual_seed(seed)
    model = wb.build_model(cfg, device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * perturb)
    return model.eval()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-30))


def check_invariants(report: Report, device: torch.device, tolerance: float = 1e-4) -> None:
    """The exactness invariants in float32 on the device (the test suite holds them to 1e-11 in float64)."""
    for name, config in VARIANTS.items():
        model = small_model(device, **config)
        idx = torch.randint(0, model.config.vocab_size, (2, 12), device=device)
        with torch.no_grad():
            exact = wb.schedules.Sequential().run(model, idx)
            for label, out in (("multipass(T)", wb.schedules.Multipass(idx.size(1)).run(model, idx)),
                               ("interleaved(T)", wb.schedules.Interleaved(idx.size(1)).run(model, idx))):
                err = max(relative_error(out.logits, exact.logits), relative_error(out.memory, exact.memory))
                report.check(f"float32 {label} = sequential, {name}", err <= tolerance, f"rel err {err:.1e}")
        regime = "standard" if name == "none" else "soft"
        prompt = idx[:, :4]
        tokens, logits = wb.generate(model, prompt, 8, regime=regime, return_logits=True)
        with torch.no_grad():
            replay = wb.schedules.Sequential().run(model, tokens[:, :-1], prompt.size(1) if regime == "soft"
                                             else tokens.size(1)).logits[:, prompt.size(1) - 1:]
        err = relative_error(logits, replay)
        report.check(f"float32 generate({regime}) = sequential, {name}", err <= tolerance, f"rel err {err:.1e}")


def check_bf16_training(report: Report, device: torch.device) -> None:
    """One AdamW step under bf16 autocast for every mechanism and schedule."""
    for mechanism in ("none", "lrt", "fbt"):
        for schedule in SCHEDULES:
            model = small_model(device, perturb=0.1, **VARIANTS["lrt per-layer mid" if mechanism == "lrt"
                                                               else mechanism]).train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            idx = torch.randint(0, model.config.vocab_size, (4, 32), device=device)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = SCHEDULE_VALUES[schedule].run(model, idx).loss(idx.roll(-1, 1))
            loss.backward()
            opt.step()
            finite = bool(torch.isfinite(loss)) and all(bool(torch.isfinite(p).all()) for p in model.parameters())
            report.check(f"bf16 training step, {mechanism} {schedule}", finite, f"loss {float(loss.detach()):.3f}")


def check_compiled_decode(report: Report, device: torch.device) -> None:
    """Compiled decoding against eager on the device: same tokens, logits to float32 rounding."""
    for name, regime in (("none", "standard"), ("lrt shared top", "soft"), ("fbt", "soft")):
        model = small_model(device, **VARIANTS[name])
        prompt = torch.randint(0, model.config.vocab_size, (2, 4), device=device)
        eager, eager_logits = wb.generate(model, prompt, 8, regime=regime, return_logits=True)
        compiled, compiled_logits = wb.generate(model, prompt, 8, regime=regime, return_logits=True, compile=True)
        err = relative_error(compiled_logits, eager_logits)
        report.check(f"compiled decode = eager, {name} {regime}", torch.equal(compiled, eager) and err <= 1e-4,
                     f"rel err {err:.1e}")


def seconds_per_call(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls after ``warmup`` untimed ones (the warm-up compiles)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_flops(device: torch.device, n: int) -> float:
    """FLOP/s of an n x n x n bf16 matmul: what this device practically reaches."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    return 2 * n ** 3 / seconds_per_call(lambda: a @ b, device, warmup=3, repeats=10)


def datasheet_peak(device: torch.device) -> tuple[str, float | None]:
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    return name, next((peak for key, peak in DATASHEET_BF16_PEAK.items() if key in name), None)


def throughput(device: torch.device, quick: bool) -> None:
    """Training tokens/s and MFU of a d12-shaped baseline under bf16 autocast, eager and compiled."""
    shape = dict(vocab_size=512, n_layer=2, n_head=2, n_embd=64, seq_len=64) if quick else dict(
        vocab_size=65536, n_layer=12, n_head=6, n_embd=768, seq_len=2048)
    batch = 2 if quick else 16
    model = wb.build_model(wb.ModelConfig(**shape), device=device).train()
    T = model.config.seq_len
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    idx = torch.randint(0, model.config.vocab_size, (batch, T), device=device)
    name, peak = datasheet_peak(device)
    measured = matmul_flops(device, 256 if quick else 8192)
    flops_per_step = model.flops_per_token(T) * batch * T
    label = "toy" if quick else "d12-shaped"
    print(f"\n{label} baseline ({model.num_params() / 1e6:.0f}M parameters, batch {batch} x {T}) on {name}; "
          f"bf16 matmul measured {measured / 1e12:.1f} TFLOP/s"
          + (f", datasheet {peak / 1e12:.0f} TFLOP/s" if peak else ", no datasheet peak for this device"))
    for compiled in (False,) if quick else (False, True):
        run = torch.compile(wb.schedules.run) if compiled else wb.schedules.run

        def step(run: Callable[..., wb.schedules.ScheduleOutput] = run) -> None:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = run(model, idx, wb.schedules.Single()).loss(idx.roll(-1, 1))
            loss.backward()
            opt.step()

        seconds = seconds_per_call(step, device, warmup=1 if quick else 3, repeats=2 if quick else 10)
        achieved = flops_per_step / seconds
        mfu = f"MFU {100 * achieved / peak:.1f} % of datasheet, " if peak else ""
        print(f"  {'compiled' if compiled else 'eager   '}  {1000 * seconds:8.1f} ms/step  "
              f"{batch * T / seconds:10.0f} tokens/s  {achieved / 1e12:6.1f} TFLOP/s  "
              f"{mfu}{100 * achieved / measured:.1f} % of measured matmul", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to exercise the script itself")
    parser.add_argument("--quick", action="store_true", help="toy sizes, nothing compiled (for --device cpu)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no GPU here (torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}, "
              "torch.cuda.is_available() is False): nothing checked. Run it on a machine with an NVIDIA GPU "
              "and a CUDA build of torch.")
        return 0
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 invariants mean float32
    torch.backends.cudnn.allow_tf32 = False
    report = Report()
    check_invariants(report, device)
    check_bf16_training(report, device)
    if not args.quick:
        check_compiled_decode(report, device)
    throughput(device, args.quick)
    print(f"\ngpu-check: {'all checks passed' if not report.failed else f'{len(report.failed)} failed'}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
