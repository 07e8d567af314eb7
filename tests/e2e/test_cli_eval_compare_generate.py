"""End-to-end: eval, compare and generate on two tiny runs trained through the command line (a baseline and an
FBT on a small text file), their numbers checked against the package functions they print, and every bad input
refused in one line naming its option (exit status 2, no traceback)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import cli, tasks
from workbench.checkpoint import load_checkpoint, save_checkpoint
from workbench.evaluation import per_example_metrics, summarize

pytestmark = pytest.mark.subprocess

N = "32"  # held-out examples of every eval here
WORDS = "the cat sat on a mat while feedback loops carry the state of each token forward into the next one".split()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A text file and two runs trained on it through ``train``: ``base`` (no feedback) and ``fbt`` (2 passes)."""
    root = tmp_path_factory.mktemp("cli_eval")
    corpus = root / "corpus.txt"
    rng = torch.Generator().manual_seed(0)
    corpus.write_text("\n".join(" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (12,), generator=rng))
                                for _ in range(300)) + "\n")
    common = ["--task", "text", "--task-param", f"path={corpus}", "--task-param", "seq_len=32", "--n-layer", "1",
              "--n-head", "2", "--n-embd", "32", "--steps", "20", "--batch-size", "8", "--eval-size", "8",
              "--no-progress"]
    assert cli.main(["train", *common, "--out", str(root / "base")]) == 0
    assert cli.main(["train", *common, "--mechanism", "fbt", "--schedule", "multipass", "--passes", "2",
                     "--out", str(root / "fbt")]) == 0
    return {"root": root, "corpus": corpus, "base": root / "base", "fbt": root / "fbt"}


def run_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_text(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def exact_loss(run: Path, corpus: Path) -> dict[str, float]:
    """What eval's exact row must hold: per_example_metrics under Sequential on the run's own held-out windows."""
    model = load_checkpoint(run / "checkpoint")
    batch = tasks.get("text", path=str(corpus), seq_len=32).sample(int(N), 0, "val")
    return summarize(per_example_metrics(model, batch, wb.schedules.Sequential()))


def test_eval_prints_the_training_schedule_and_the_exact_recurrence(runs, capsys):
    record = run_json(capsys, "eval", str(runs["fbt"]), "--n", N)
    assert [(r["schedule"], r["role"]) for r in record["results"]] == [("multipass(K=2)", "training"),
                                                                       ("sequential", "exact")]
    exact, expected = record["results"][1], exact_loss(runs["fbt"], runs["corpus"])
    for key in ("loss", "bpb", "accuracy"):
        assert exact[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12)
    assert "answer_accuracy" not in exact  # meaningless on text
    assert record["results"][0]["loss"] != exact["loss"]  # two passes are not the exact recurrence
    assert record["training"]["step"] == 20 and record["targets"] == int(N) * 32
    out = run_text(capsys, "eval", str(runs["fbt"]), "--n", N)
    assert "multipass(K=2) [training]" in out and "sequential [exact]" in out and "bits/byte" in out
    assert "answer" not in out


def test_eval_of_a_baseline_gives_the_exact_schedule_only(runs, capsys):
    record = run_json(capsys, "eval", str(runs["base"]), "--n", N)
    assert [r["role"] for r in record["results"]] == ["exact"]
    assert record["results"][0]["loss"] == pytest.approx(exact_loss(runs["base"], runs["corpus"])["loss"], rel=1e-9)


def test_a_run_directory_and_its_checkpoint_are_the_same_argument(runs, capsys):
    by_run = run_json(capsys, "eval", str(runs["fbt"]), "--n", "8")
    by_checkpoint = run_json(capsys, "eval", str(runs["fbt"] / "checkpoint"), "--n", "8")
    assert {**by_run, "run": None} == {**by_checkpoint, "run": None}
    assert run_json(capsys, "info", str(runs["fbt"]))["checkpoint"] == str(runs["fbt"] / "checkpoint")
    # --text: the same file given explicitly reads the same windows
    assert run_json(capsys, "eval", str(runs["fbt"]), "--n", "8", "--text", str(runs["corpus"]))["results"] == \
        by_run["results"]


def test_compare_gives_the_paired_difference_of_the_eval_means(runs, capsys):
    base = run_json(capsys, "eval", str(runs["base"]), "--n", N)["results"][-1]
    fbt = run_json(capsys, "eval", str(runs["fbt"]), "--n", N)["results"][-1]
    record = run_json(capsys, "compare", str(runs["base"]), str(runs["fbt"]), "--n", N)
    (diff,) = record["differences"]
    assert diff["loss"]["mean"] == pytest.approx(fbt["loss"] - base["loss"], rel=1e-9, abs=1e-12)
    assert diff["bpb"]["mean"] == pytest.approx(fbt["bpb"] - base["bpb"], rel=1e-9, abs=1e-12)
    assert diff["loss"]["low"] <= diff["loss"]["mean"] <= diff["loss"]["high"]
    assert [r["step"] for r in record["runs"]] == [20, 20] and record["runs"][1]["flops"] > record["runs"][0]["flops"]
    assert record["comparison"].startswith("equal steps (")
    out = run_text(capsys, "compare", str(runs["base"]), str(runs["fbt"]), "--n", "8")
    assert "comparison  equal steps" in out and "train FLOPs" in out and "95 % bootstrap interval" in out
    same = run_json(capsys, "compare", str(runs["base"]), str(runs["base"] / "checkpoint"), "--n", "8")
    assert same["comparison"] == "equal steps and equal FLOPs within 1 %"
    assert same["differences"][0]["loss"]["mean"] == 0.0


def test_generate_decodes_under_the_three_regimes(runs, capsys):
    record = run_json(capsys, "generate", str(runs["fbt"]), "--prompt", "the cat", "--max-new-tokens", "8")
    tokenizer = tasks.ByteTokenizer()
    ids = [tokenizer.bos_id, *b"the cat"]
    assert record["prompt_tokens"] == ids and set(record["regimes"]) == {"standard", "soft", "fused"}
    model = load_checkpoint(runs["fbt"] / "checkpoint")
    for regime, result in record["regimes"].items():
        expected = wb.generate(model, torch.tensor([ids]), 8, regime=regime)[0, len(ids):]
        assert result["tokens"] == expected.tolist() and result["text"] == tokenizer.decode(expected)
    out = run_text(capsys, "generate", str(runs["fbt"]), "--prompt", "the cat", "--max-new-tokens", "8")
    assert all(f"--- {regime} (" in out for regime in ("standard", "soft", "fused"))
    one = run_json(capsys, "generate", str(runs["fbt"]), "--prompt", "the cat", "--max-new-tokens", "8",
                   "--regime", "soft")
    assert one["regimes"] == {"soft": record["regimes"]["soft"]}


def test_probe_on_text_reads_labels_from_a_file(runs, capsys, tmp_path):
    out = tmp_path / "probe"
    assert cli.main(["probe", str(runs["fbt"]), "--out", str(out), "--n", "24"]) == 2  # text has no labels
    assert "--labels" in capsys.readouterr().err
    examples = pd.read_csv(out / "probe_examples.csv", keep_default_na=False)
    assert len(examples) == 24 and all(len(t.encode()) <= 32 for t in examples["text"])
    (tmp_path / "labels.txt").write_text("".join(f"{i % 2}\n" for i in range(24)))
    assert cli.main(["probe", str(runs["fbt"]), "--out", str(out), "--labels", str(tmp_path / "labels.txt"),
                     "--conditions", "standard", "sequential", "--no-random-baseline"]) == 0
    table = pd.read_csv(out / "probes.csv")
    assert set(table["task"]) == {"text"} and set(table["n"]) == {24} and len(table) == 2 * 2


def bad_inputs(runs: dict[str, Path], tmp_path: Path) -> list[tuple[list[str], str]]:
    char_model = tmp_path / "char"
    save_checkpoint(perturbed_model(small_config(vocab_size=tasks.CharTokenizer().vocab_size)), char_model)
    (tmp_path / "labels.txt").write_text("1\nx\n")
    fbt, missing = str(runs["fbt"]), str(tmp_path / "missing")
    return [
        (["eval", missing], "run directory"),  # both forms named
        (["eval", str(tmp_path)], "checkpoint directory"),
        (["eval", fbt, "--schedule", "multipass:0"], "--schedule"),
        (["eval", fbt, "--schedule", "sideways"], "--schedule"),
        (["eval", fbt, "--task-params", "[1]"], "--task-params"),
        (["eval", fbt, "--task-params", '{"seqlen": 3}'], "--task-params"),
        (["eval", fbt, "--text", missing], "--text"),
        (["eval", str(char_model), "--text", str(runs["corpus"])], "--text"),
        (["eval", fbt, "--n", "0"], "--n"),
        (["eval", fbt, "--split", "test"], "--split"),
        (["eval", fbt, "--device", "gpu"], "--device"),
        (["compare", fbt], "RUN"),
        (["compare", fbt, missing], "RUN"),
        (["generate", fbt, "--prompt", "x", "--max-new-tokens", "100"], "--max-new-tokens"),
        (["generate", fbt, "--prompt", "x" * 40], "--prompt"),
        (["generate", fbt, "--prompt", "x", "--temperature", "nan"], "--temperature"),
        (["generate", fbt, "--prompt", "x", "--regime", "warm"], "--regime"),
        (["generate", fbt, "--prompt", "x", "--prefill-passes", "0"], "--prefill-passes"),
        (["generate", fbt, "--prompt-file", missing], "--prompt-file"),
        (["generate", fbt], "--prompt"),
        (["generate", str(char_model), "--prompt", "caf\u00e9"], "--prompt"),
        (["probe", fbt, "--out", str(tmp_path / "p"), "--labels", str(tmp_path / "labels.txt")], "--labels"),
        (["probe", fbt, "--out", str(tmp_path / "p"), "--n", "100000"], "--n"),
    ]


def test_every_bad_input_is_one_line_naming_its_option(runs, capsys, tmp_path):
    for argv, option in bad_inputs(runs, tmp_path):
        capsys.readouterr()
        try:
            status = cli.main(argv)
        except SystemExit as e:  # argparse: usage, then the one error line
            status = e.code
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]
        assert status == 2, (argv, err)
        assert "error:" in last and option in last, (argv, err)
        assert "Traceback" not in err, (argv, err)


def test_a_bad_input_exits_2_with_one_line_in_a_fresh_process(tmp_path):
    result = subprocess.run([sys.executable, "-m", "workbench", "generate", str(tmp_path), "--prompt", "x"],
                            capture_output=True, text=True, timeout=600,
                            env={"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "")})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "run directory" in result.stderr and "checkpoint directory" in \
        result.stderr


def test_bits_per_byte_is_the_loss_in_bits(runs, capsys):
    record = run_json(capsys, "eval", str(runs["base"]), "--n", "8")
    assert record["results"][0]["bpb"] == pytest.approx(record["results"][0]["loss"] / math.log(2))


def test_train_reports_each_held_out_number_with_its_schedule_and_the_exact_recurrence(runs, tmp_path, capsys):
    """The trainer's held-out loss is under its training schedule; a feedback run also gets the exact recurrence's
    on the same windows (eval's exact row), with eval's metrics for text (no answer accuracy)."""
    capsys.readouterr()
    assert cli.main(["train", "--task", "text", "--task-param", f"path={runs['corpus']}", "--task-param",
                     "seq_len=32", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--steps", "20",
                     "--batch-size", "8", "--eval-size", "8", "--no-progress", "--mechanism", "fbt", "--schedule",
                     "multipass", "--passes", "2", "--out", str(tmp_path / "fbt")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("held out")]
    assert len(lines) == 2 and "training schedule" in lines[0] and "exact recurrence" in lines[1]
    assert not any("answer" in line for line in lines) and all("bpb" in line for line in lines)
    exact = float(lines[1].split("loss ")[1].split(",")[0])
    model = load_checkpoint(tmp_path / "fbt" / "checkpoint")  # the trainer's held-out windows: 8, seed 0
    batch = tasks.get("text", path=str(runs["corpus"]), seq_len=32).sample(8, 0, "val")
    assert exact == pytest.approx(summarize(per_example_metrics(model, batch, wb.schedules.Sequential()))["loss"],
                                  abs=1e-4)
