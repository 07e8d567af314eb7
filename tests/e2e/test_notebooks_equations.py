"""One form of FBT's fusion equation, with its norms, everywhere: every statement of it in a notebook's text is
the one notebooks/METHODS.md writes (the GLU fusion, the additive fusion, or the Hugging Face wrapper's GLU fusion
scaled back by rms(e_t)), read as an expression, so spacing, LaTeX and redundant brackets do not matter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = ROOT / "notebooks" / "METHODS.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FENCED = re.compile(r"```.*?```", re.S)
SPANS = re.compile(r"\$\$([^$]+?)\$\$|\$([^$]+?)\$|`([^`\n]+)`|^ {4}(\S.*)$", re.M)
# LaTeX and code spellings of one thing, in the order they are replaced
SPELLINGS = [(r"\\mathrm\{RMSNorm\}", "RMSNorm"), (r"\\mathrm\{rms\}", "rms"), (r"\bnorm\b", "RMSNorm"),
             (r"\\sigma\b", "sigmoid"), (r"\\odot|\\cdot|·", "*"), (r"\\(?:[Bb]ig+[lr]?|left|right)\b", ""),
             (r"\\[;,!:]", " "), (r"\{", "("), (r"\}", ")")]
TOKEN = re.compile(r"RMSNorm|sigmoid|rms|W_U|W_G|m_\(t-1\)|e_t|h\^L_\(t-1\)|h\^\(L\)_\(t-1\)|[me](?![\w^])|\S")
FUNCTIONS = {"RMSNorm", "sigmoid", "rms"}
ALIASES = {"m": "m_(t-1)", "e": "e_t"}  # the code's short names for m_{t-1} and e_t


def strip_underbraces(text: str) -> str:
    r"""``\underbrace{X}_{\text{...}}`` -> ``X``."""
    while (start := text.find(r"\underbrace{")) >= 0:
        i, depth = start + len(r"\underbrace{"), 1
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        inner, rest = text[start + len(r"\underbrace{"):i - 1], text[i:]
        label = re.match(r"_\{(?:[^{}]|\{[^{}]*\})*\}", rest)
        text = text[:start] + inner + rest[label.end() if label else 0:]
    return text


def parse(text: str) -> object:
    """An expression as a tree: ``('+', ...)``, ``('*', ...)``, ``('apply', ...)`` (a matrix applied to a vector,
    written side by side), ``(function, argument)``, or a symbol."""
    text = strip_underbraces(text)
    for pattern, replacement in SPELLINGS:
        text = re.sub(pattern, replacement, text)
    tokens = [ALIASES.get(t, t) for t in TOKEN.findall(text)]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        token = peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(f"expected {expected!r} at token {pos} of {tokens[:40]}")
        pos += 1
        return token

    def joined(op: str, items: list) -> object:
        return items[0] if len(items) == 1 else (op, *items)

    def total() -> object:
        items = [product()]
        while peek() == "+":
            take("+")
            items.append(product())
        return joined("+", items)

    def product() -> object:
        items = [applied()]
        while peek() == "*":
            take("*")
            items.append(applied())
        return joined("*", items)

    def applied() -> object:
        items = [atom()]
        while peek() not in (None, "+", "*", ")"):
            items.append(atom())
        return joined("apply", items)

    def atom() -> object:
        token = take()
        if token == "(":
            inner = total()
            take(")")
            return inner
        if token in FUNCTIONS:
            take("(")
            inner = total()
            take(")")
            return (token, inner)
        return token

    tree = total()
    if pos != len(tokens):
        raise ValueError(f"unread tokens {tokens[pos:]}")
    return tree


def fusion_statements(text: str) -> list[str]:
    """Every math or code span of a page's text that states the fusion (it names W_U, W_G and a sigmoid), its
    ``u_t =`` and anything after the expression (``\\qquad ...``, a closing comma) cut off."""
    found = []
    for m in SPANS.finditer(FENCED.sub("", text)):
        span = next(g for g in m.groups() if g is not None)
        if not ("W_U" in span and "W_G" in span and re.search(r"\\sigma|sigmoid", span)):
            continue
        span = re.sub(r"^.*?u_t\s*(\\;)?=(\\;)?", "", span.strip(), flags=re.S)
        span = re.split(r"\\qquad|,\s*$|\.\s*$", span.strip())[0]
        found.append(span.strip().rstrip(","))
    return found


def methods_forms() -> dict[str, object]:
    glu, additive = [], []
    for statement in fusion_statements(METHODS.read_text()):
        tree = parse(statement)
        (additive if "+" in json.dumps(tree) else glu).append(tree)
    assert len(glu) == 1 and len(additive) == 1, "METHODS.md states the GLU and the additive fusion once each"
    return {"glu": glu[0], "additive": additive[0], "hf": ("*", glu[0], ("rms", "e_t"))}


def prose(path: Path) -> str:
    return "\n\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                       if c["cell_type"] == "markdown")


def which(tree: object, forms: dict[str, object]) -> str:
    text = json.dumps(tree)
    return "hf" if '"rms"' in text else "additive" if '"+"' in text else "glu"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_statement_of_the_fusion_is_methods_form(path):
    forms = methods_forms()
    for statement in fusion_statements(prose(path)):
        tree = parse(statement)
        kind = which(tree, forms)
        assert tree == forms[kind], (f"{path.name} writes the {kind} fusion as {statement!r}, read as {tree}; "
                                     f"METHODS.md's form is {forms[kind]}")


def test_the_reader_tells_forms_apart():
    """The same equation in LaTeX and in code reads the same; one without a norm, or with the state before its
    norm, does not."""
    forms = methods_forms()
    latex = (r"u_t \;=\; \mathrm{RMSNorm}\Big( \underbrace{W_U\, m_{t-1}}_{\text{value: the state}} \;\odot\;"
             r"\underbrace{\sigma\big(W_G\, \mathrm{RMSNorm}(e_t)\big)}_{\text{gate: the token}} \Big)")
    assert parse(fusion_statements(f"$${latex},\\qquad m_{{t-1}} = x$$")[0]) == forms["glu"]
    assert parse("norm(norm(e) + (W_U m) * sigmoid(W_G norm(e)))") == forms["additive"]
    assert parse(r"(W_U\, h^L_{t-1}) \odot \sigma(W_G\, e_t)") != forms["glu"]
    assert parse(r"\mathrm{RMSNorm}((W_U m_{t-1}) \odot \sigma(W_G e_t))") != forms["glu"]
    assert parse("norm(e + (W_U m) * sigmoid(W_G e))") != forms["additive"]
