"""Synthetic tasks: labels recomputed by independent parsers, determinism, groups, padding, registry."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
import torch

import workbench.tasks as tasks

torch.set_num_threads(1)

PROBES = [
    ("completion_tracking", {}),
    ("completion_tracking", {"scratch_updates": 0}),
    ("delayed_memory", {}),
    ("delayed_memory", {"scratch_updates": 32, "loss_on": "all"}),
    ("multi_register", {}),
    ("multi_register", {"registers": 1, "writes": 8}),
    ("multi_register", {"registers": 8, "writes": 4, "scratch_updates": 0}),
    ("multi_register", {"registers": 2, "writes": 1, "scratch_layout": "shuffled"}),
    ("multi_register", {"registers": 4, "writes": 2, "scratch_updates": 32, "scratch_layout": "shuffled"}),
]


# ---- independent parsers: the test's own reading of the paper's text format -----------------------

def parse_probe(name: str, text: str) -> tuple[str, str, str]:
    """(label recomputed from the text before the colon, label written after it, text with the
    label-bearing detail blanked out)."""
    head, written = text.rsplit(":", 1)
    lines = head.split("\n")
    if name == "completion_tracking":
        required = int(re.fullmatch(r"required = (\d)", lines[0]).group(1))
        completed = int(re.fullmatch(r"completed = (\d)", lines[1]).group(1))
        assert all(re.fullmatch(r"scratch (\+=|-=|\^=) \d", line) for line in lines[2:-1])
        assert lines[-1] == "Status"
        label = "done" if required == completed else "more"
        redacted = "\n".join(["required = ?", "completed = ?"] + lines[2:])
    elif name == "delayed_memory":
        bit = re.fullmatch(r"state = ([01])", lines[0]).group(1)
        assert lines[-1] == "# final state"
        label = bit
        redacted = "\n".join(["state = ?"] + lines[1:])
    else:
        query = re.fullmatch(r"query = (r\d)", lines[-2]).group(1)
        assert lines[-1] == "Value"
        writes = [i for i, line in enumerate(lines) if line.startswith(query + " = ")]
        label = lines[writes[-1]][-1]
        lines[writes[-1]] = query + " = ?"
        redacted = "\n".join(lines)
    return label, written.strip(), redacted


def register_file(text: str, upto: int, registers: int) -> int:
    """The register file as an int after reading text[:upto + 1]; -1 until every register was written."""
    value, written = 0, set()
    for m in re.finditer(r"^r(\d) = ([01])$", text, flags=re.M):
        if m.start(2) > upto:
            break
        r, v = int(m.group(1)), int(m.group(2))
        value = (value & ~(1 << r)) | (v << r)
        written.add(r)
    return value if len(written) == registers else -1


@pytest.mark.parametrize("name,params", PROBES)
def test_probe_labels_match_an_independent_parser(name: str, params: dict) -> None:
    task = tasks.get(name, **params)
    batch = task.sample(64, seed=3)
    for i, text in enumerate(batch.texts):
        label, written, _ = parse_probe(name, text)
        assert label == written == batch.label_names[batch.labels[i]]
        assert text[batch.label_positions[i]] == ":" and text.rindex(":") == batch.label_positions[i]
        assert batch.state[i, batch.label_positions[i]] >= 0
        if name == "multi_register":
            pos = int(batch.label_positions[i])
            assert batch.state[i, pos] == register_file(text, pos, task.params["registers"])
        else:
            assert batch.state[i, batch.label_positions[i]] == batch.labels[i]


@pytest.mark.parametrize("name,params", PROBES)
def test_probe_groups_differ_only_in_the_label_bearing_detail(name: str, params: dict) -> None:
    batch = tasks.get(name, **params).sample(40, seed=1)
    by_group: dict[int, list[int]] = {}
    for i, g in enumerate(batch.groups.tolist()):
        by_group.setdefault(g, []).append(i)
    assert len(by_group) > 1
    for members in by_group.values():
        redacted = {parse_probe(name, batch.texts[i])[2] for i in members}
        assert len(redacted) == 1
        assert len({batch.texts[i] for i in members}) == len(members)
        if len(members) in (2, 4):  # a whole group holds every label equally often
            assert batch.labels[members].sum() * 2 == len(members)


@pytest.mark.parametrize("name,params", PROBES)
def test_probe_labels_balanced_and_lengths_exact(name: str, params: dict) -> None:
    task = tasks.get(name, **params)
    batch = task.sample(48, seed=7)
    assert batch.labels.float().mean() == 0.5
    assert (batch.lengths == task.seq_len).all() and batch.tokens.shape == (48, task.seq_len)
    assert [task.tokenizer.decode(row) for row in batch.tokens] == batch.texts


def test_completion_tracking_balances_digits_across_fields() -> None:
    batch = tasks.get("completion_tracking").sample(4 * 45, seed=0)
    required = Counter(t.split("\n")[0][-1] for t in batch.texts)
    completed = Counter(t.split("\n")[1][-1] for t in batch.texts)
    assert set(required.values()) == set(completed.values()) == {18}
    assert len({frozenset((t[11], t[25])) for t in batch.texts if t[11] != t[25]}) == 45


@pytest.mark.parametrize("name,params", PROBES[:1] + PROBES[2:3] + PROBES[4:5])
def test_probe_targets(name: str, params: dict) -> None:
    batch = tasks.get(name, **params).sample(8, seed=0)
    for i in range(8):
        colon, n = int(batch.label_positions[i]), int(batch.lengths[i])
        expected = torch.full((n,), -1)
        expected[colon: n - 1] = batch.tokens[i, colon + 1: n]
        assert torch.equal(batch.targets[i], expected)
    everywhere = tasks.get(name, **params, loss_on="all").sample(8, seed=0)
    assert torch.equal(everywhere.tokens, batch.tokens)
    assert torch.equal(everywhere.targets[:, :-1], batch.tokens[:, 1:])
    assert (everywhere.targets[:, -1] == -1).all()


def test_multi_register_scratch_layouts() -> None:
    """Block: every write line first. Shuffled: the same writes, values, scratch lines and query, the writes
    at random lines, so no write sits at a fixed offset."""
    def write_lines(text: str) -> list[int]:
        return [i for i, line in enumerate(text.split("\n")) if re.fullmatch(r"r\d = [01]", line)]

    params = {"registers": 2, "writes": 2, "scratch_updates": 8}
    block = tasks.get("multi_register", **params).sample(64, seed=5)
    assert all(write_lines(t) == [0, 1, 2, 3] for t in block.texts)
    shuffled_task = tasks.get("multi_register", **params, scratch_layout="shuffled")
    shuffled = shuffled_task.sample(64, seed=5)
    assert shuffled_task.params["scratch_layout"] == "shuffled"
    assert "scratch_layout" not in tasks.get("multi_register", **params).params  # old configs keep their params
    positions = [write_lines(t) for t in shuffled.texts]
    assert all(len(p) == 4 for p in positions)
    for slot in range(4):  # every write line lands at several different lines
        assert len({p[slot] for p in positions}) >= 3
    assert (shuffled.lengths == shuffled_task.seq_len).all()
    with pytest.raises(ValueError, match="scratch_layout"):
        tasks.get("multi_register", scratch_layout="random")


@pytest.mark.parametrize("name", ["completion_tracking", "delayed_memory", "multi_register"])
def test_probe_tasks_work_at_256_scratch_updates(name: str) -> None:
    params = {"registers": 8, "writes": 8} if name == "multi_register" else {}
    task = tasks.get(name, scratch_updates=256, **params)
    batch = task.sample(4, seed=0)
    assert batch.tokens.shape == (4, task.seq_len)
    assert sum(t.count("scratch ") for t in batch.texts) == 4 * 256
    assert tasks.get(name).seq_len < 256


ALL_TASKS = [("arith_cot", {}), ("running_sum", {"min_length": 5}), ("completion_tracking", {}),
             ("delayed_memory", {}), ("multi_register", {"registers": 4})]


@pytest.mark.parametrize("name,params", ALL_TASKS)
def test_sampling_is_deterministic_in_the_seed(name: str, params: dict) -> None:
    task = tasks.get(name, **params)
    a, b = task.sample(16, seed=5), task.sample(16, seed=5)
    assert a.texts == b.texts and torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
    assert task.sample(16, seed=6).texts != a.texts
    assert task.sample(16, seed=5, split="val").texts != a.texts
    rebuilt = tasks.get(task.name, **json.loads(json.dumps(task.params)))
    assert rebuilt.sample(16, seed=5).texts == a.texts


@pytest.mark.parametrize("name,params", ALL_TASKS)
def test_batches_are_padded_consistently(name: str, params: dict) -> None:
    task = tasks.get(name, **params)
    batch = task.sample(32, seed=2)
    n, t = batch.tokens.shape
    assert batch.targets.shape == (n, t) and batch.groups.shape == (n,) and len(batch.texts) == n
    assert batch.tokens.dtype == batch.targets.dtype == torch.long
    assert t == int(batch.lengths.max()) <= task.seq_len
    pad = torch.arange(t)[None, :] >= batch.lengths[:, None]
    assert (batch.tokens[pad] == task.tokenizer.pad_id).all() and (batch.targets[pad] == -1).all()
    if batch.state is not None:
        assert (batch.state[pad] == -1).all()
    assert (batch.targets[~pad] < task.vocab_size).all() and (batch.targets[batch.mask] >= 0).all()
    moved = batch.to("cpu")
    assert torch.equal(moved.tokens, batch.tokens) and moved.texts == batch.texts


def test_char_vocabulary_is_fixed_across_parameters() -> None:
    sizes = {tasks.get(name, **params).vocab_size for name, params in ALL_TASKS + PROBES}
    assert sizes == {tasks.CharTokenizer().vocab_size}
    tok = tasks.CharTokenizer()
    text = "required = 4\nStatus: done\n~{}"
    assert tok.decode(tok.encode(text)) == text and tok.decode(torch.tensor(tok.encode(text))) == text
    assert tok.decode([tok.pad_id] + tok.encode("ab") + [tok.pad_id]) == "ab"
    with pytest.raises(ValueError, match="'\u00e9'"):
        tok.encode("caf\u00e9")


def test_running_sum_state_and_targets() -> None:
    task = tasks.get("running_sum", p=7, length=20, min_length=3)
    batch = task.sample(32, seed=0)
    assert len(set(batch.lengths.tolist())) > 1
    for i, text in enumerate(batch.texts):
        sums = np.cumsum([int(c) for c in text]) % 7
        n = len(text)
        assert batch.lengths[i] == n and max(text) < "7"
        assert batch.state[i, :n].tolist() == sums.tolist()
        assert task.tokenizer.decode(batch.targets[i, :n]) == "".join(map(str, sums))
    assert batch.labels is None and batch.groups.tolist() == list(range(32))


def test_arith_cot_traces_are_correct_and_mix_verbosities() -> None:
    task = tasks.get("arith_cot", steps=4, max_value=50)
    batch = task.sample(120, seed=0)
    kinds = Counter()
    for i, (text, prompt) in enumerate(zip(batch.texts, batch.prompts)):
        assert text.startswith(prompt) and re.fullmatch(r"Q: \d+([+-]\d+){4}\n", prompt)
        answer = eval(prompt[3:])  # only digits, + and -: the test's own evaluator
        assert batch.labels[i] == answer and 0 <= answer <= 50
        lines = text[len(prompt):].splitlines()
        assert lines[-1] == f"#### {answer}"
        assert all(eval(line[2:]) == answer for line in lines[:-1])  # every written step is correct
        kinds[len(lines) - 1] += 1
        assert text[batch.label_positions[i]] == "#" and text[batch.label_positions[i] + 1] == " "
        start = len(prompt) - 1
        assert (batch.targets[i, :start] == -1).all()
        assert torch.equal(batch.targets[i, start: len(text) - 1], batch.tokens[i, start + 1: len(text)])
        continuation = text[len(prompt):]
        assert task.check_answer(continuation, batch.labels[i])
        assert not task.check_answer(continuation, answer + 1)
        assert task.trace_length(continuation) == len(continuation) - len(lines[-1]) - 1
    assert kinds[0] > 10 and kinds[3] > 10 and kinds[1] + kinds[2] > 10  # answer only, full, skipped
    assert max(batch.lengths) <= task.seq_len
    assert task.extract_answer("> 3+4\n#### -12\n") == -12 and task.trace_length("no answer") is None
    assert not task.check_answer("no answer", 3)


def test_arith_cot_never_writes_a_trivial_step_and_skip_trivial_0_changes_nothing() -> None:
    """skip_trivial=k folds every operation with an operand <= k into the next line, in every verbosity, so
    whether a line comes is partly a property of the question; 0 is the data of existing checkpoints."""
    folded = tasks.get("arith_cot", steps=4, max_value=50, verbosity="full", skip_trivial=9)
    batch = folded.sample(200, seed=1)
    skipped = 0
    for text, prompt in zip(batch.texts, batch.prompts):
        trivial = folded.trivial(prompt)
        lines = text[len(prompt):].splitlines()[:-1]
        assert len(lines) == sum(not t for t in trivial)  # full verbosity: every non-trivial step, no other
        skipped += sum(trivial)
        assert all(eval(line[2:]) == eval(prompt[3:]) for line in lines)  # still correct, only folded
    assert skipped > 50 and folded.params["skip_trivial"] == 9
    plain, zero = (tasks.get("arith_cot", steps=3, max_value=19, **kw) for kw in ({}, {"skip_trivial": 0}))
    assert "skip_trivial" not in zero.params and plain.sample(64, 2).texts == zero.sample(64, 2).texts
    assert zero.trivial("Q: 5+1-3+2\n") == [False, False]
    assert tasks.get("arith_cot", steps=3, max_value=19, skip_trivial=1).trivial("Q: 5+1-3+2\n") == [True, False]
    with pytest.raises(ValueError, match="skip_trivial=19"):
        tasks.get("arith_cot", max_value=19, skip_trivial=19)
    with pytest.raises(ValueError, match="prompt="):
        zero.trivial("Q: 5+1\n")


def test_arith_cot_seq_len_is_tight() -> None:
    task = tasks.get("arith_cot", steps=2, max_value=9, verbosity="full")
    batch = task.sample(200, seed=0)
    assert int(batch.lengths.max()) == task.seq_len
    only = tasks.get("arith_cot", verbosity="answer", loss_on="answer").sample(4, seed=0)
    assert all(t.count("\n") == 2 for t in only.texts)
    assert all((only.targets[i] >= 0).sum() == len(t) - 1 - only.label_positions[i]
               for i, t in enumerate(only.texts))


def test_registry_and_errors() -> None:
    assert tasks.names() == ["arith_cot", "completion_tracking", "delayed_memory", "multi_register",
                             "running_sum", "text"]
    with pytest.raises(ValueError, match="'nope'.*delayed_memory"):
        tasks.get("nope")
    with pytest.raises(ValueError, match=r"\['scratch'\].*scratch_updates"):
        tasks.get("delayed_memory", scratch=8)
    with pytest.raises(ValueError, match="scratch_updates=7.*256"):
        tasks.get("delayed_memory", scratch_updates=7)
    with pytest.raises(ValueError, match="registers=3"):
        tasks.get("multi_register", registers=3)
    with pytest.raises(ValueError, match="loss_on"):
        tasks.get("completion_tracking", loss_on="none")
    with pytest.raises(ValueError, match="min_length=9"):
        tasks.get("running_sum", length=8, min_length=9)
    with pytest.raises(ValueError, match="split='test'"):
        tasks.get("running_sum").sample(2, seed=0, split="test")
    with pytest.raises(ValueError, match="seed=-1"):
        tasks.get("running_sum").sample(2, seed=-1)
    with pytest.raises(ValueError, match="n=0"):
        tasks.get("delayed_memory").sample(0, seed=0)


def test_train_stream_is_resumable_and_sharded() -> None:
    task = tasks.get("delayed_memory")
    stream = iter(tasks.TrainStream(task, batch_size=4, seed=1))
    first = [next(stream).texts for _ in range(3)]
    resumed = tasks.TrainStream(task, batch_size=4, seed=1, start_step=1)
    assert next(iter(resumed)).texts == first[1] and resumed.step == 2
    assert resumed.batch(2).texts == first[2]
    other_rank = tasks.TrainStream(task, batch_size=4, seed=1, rank=1, world_size=2)
    assert other_rank.batch(0).texts != first[0]
    assert first[0] != first[1]
    with pytest.raises(ValueError, match="rank=2"):
        tasks.TrainStream(task, batch_size=4, rank=2, world_size=2)


def test_describe_lists_every_task() -> None:
    table = tasks.describe()
    assert table["name"].tolist() == tasks.names()
    assert list(table.columns) == ["name", "vocab_size", "seq_len", "example", "params"]
    assert all(isinstance(t, str) and t for t in table["example"])
    for name, params in zip(table["name"], table["params"]):
        assert tasks.get(name, **json.loads(params)).params == json.loads(params)
