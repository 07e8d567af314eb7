"""``make docs``: the API reference (docs/API.md, its contents, and a page per area under docs/api/) from the
package's public names and docstrings, the index of docs/ (docs/README.md), and the pages written from the shipped
checkpoints' stored summaries (docs/SPECIMENS.md, RESULTS.md). Nothing is trained, so it takes seconds.

    python tools/docs.py            # write them; exit 1 naming each broken link or page missing from the index
    python tools/docs.py --check    # write nothing; exit 1 also naming each file the code would write differently

Warnings are errors: a relative link in README.md, RESULTS.md or a page of docs/ that names no file, or a page
of docs/ the index does not list, fails both. The reference is not committed (.gitignore): ``--check`` compares
it only where a build left one, and a link to it counts as a link to the page ``make docs`` writes.

Why plain Markdown and not an mkdocs or Sphinx site: GitHub and JupyterLab (where our readers are) render it with
no site build, no server and no extra dependency, and the suite that checks the code checks its links.

Each area (``AREAS``: model, mechanisms, schedules, decoding, training, analysis, experiments, hf, display, cli)
has a page with one section per public module it holds (``pkgutil`` order, names starting with ``_`` skipped):
its docstring, then its public names with their signatures and the first paragraph of their docstrings (a
class adds its ``Attributes:`` section, the field documentation, and its public methods). A package that
declares ``__all__`` lists those names, each linked to the module that defines it; a module without one
documents the classes and functions it defines.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the repository's package, not an installed one
    sys.path.insert(0, str(ROOT))

import workbench  # noqa: E402
from workbench.config import field_docs  # noqa: E402
from workbench.experiments import results_page  # noqa: E402
from workbench.files import write_bytes_atomic  # noqa: E402

DOCS = ROOT / "docs"
API = DOCS / "API.md"  # the reference's contents: each area, its page and its modules
API_DIR = DOCS / "api"  # a page per area
INDEX = DOCS / "README.md"  # GitHub and JupyterLab both show a folder's README when it opens
BUILT = (API, API_DIR)  # written for the reader by make docs, not committed: a clone has none until then
# the reference's areas, in a reader's order: what each is for and the modules it holds (a module goes to the area
# naming the longest prefix of its dotted name; ``workbench`` itself, the names ``import workbench as wb`` gives,
# opens the model's page)
AREAS = {
    "model": ("the backbone, its config, hooks and KV cache", ("workbench", "workbench.config", "workbench.model",
              "workbench.functional", "workbench.fast", "workbench.hooks", "workbench.kv_cache", "workbench.diagrams",
              "workbench.validation")),
    "mechanisms": ("none, LRT and FBT: what a block reads from the memory", ("workbench.mechanisms",)),
    "schedules": ("how a sequence is computed when each position reads its predecessor's memory",
                  ("workbench.schedules",)),
    "decoding": ("generation under STANDARD / SOFT / FUSED and held-out evaluation",
                 ("workbench.decode", "workbench.evaluation", "workbench.metrics")),
    "training": ("the trainer, its config, optimisers, tasks and checkpoints",
                 ("workbench.train", "workbench.train_config", "workbench.optim", "workbench.tasks",
                  "workbench.checkpoint", "workbench.store", "workbench.run_dir", "workbench.files")),
    "analysis": ("caches, probes, interventions, fixed points, lenses and statistics",
                 ("workbench.analysis", "workbench.stats")),
    "experiments": ("the recipes, their runs and the results pages", ("workbench.experiments",)),
    "hf": ("FeedbackLM, a transformers model", ("workbench.hf",)),
    "display": ("figures and widgets", ("workbench.plots", "workbench.widgets")),
    "cli": ("python -m workbench", ("workbench.cli",)),
}
SKIP = ("workbench.__main__",)  # importing it runs the command line
# Each page of docs/ and what a reader opens it for, in the order a newcomer needs them: the index's lines
PAGES = {
    "USAGE.md": "training, the recipes, every command, benchmarks, the package's layout, GPUs, checkpoints "
                "and the recipes' figures",
    "CLI.md": "a session at the command line, from a text file to decoded text, with what each command printed",
    "API.md": "every public name of the package with its signature and docstring, a page per area in api/ "
              "(written by `make docs`, not committed)",
    "SPECIMENS.md": "every shipped model: its recipe, task, shape, steps, held-out number and gates",
}


def _plain(text: str) -> str:
    """``text`` without memory addresses (a default's repr), so the reference is the same on every run."""
    return re.sub(r" at 0x[0-9a-f]+", "", text)


class _Raw(str):
    """An annotation kept as the source wrote it (``from __future__ import annotations``), shown unquoted."""

    def __repr__(self) -> str:
        return str(self)


def public_modules() -> list[ModuleType]:
    """``workbench`` and every module under it whose dotted name has no part starting with ``_``."""
    names = ["workbench"] + [m.name for m in pkgutil.walk_packages(workbench.__path__, "workbench.")
                             if m.name not in SKIP and not any(p.startswith("_") for p in m.name.split("."))]
    return [importlib.import_module(name) for name in names]


def public_names(module: ModuleType) -> list[str]:
    """``__all__`` where the module declares it, else the classes and functions it defines, not starting with
    ``_``, in source order."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, obj in vars(module).items() if not name.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == module.__name__]


def signature(obj: object, width: int | None = None, drop_self: bool = False) -> str:
    """``(params) -> return`` with annotations as written and no memory addresses, one parameter a line when
    longer than ``width``; ``(...)`` where Python cannot say."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = [p.replace(annotation=_Raw(p.annotation)) if isinstance(p.annotation, str) else p
              for p in sig.parameters.values()]
    if drop_self and params and params[0].name == "self":
        params = params[1:]
    ret = sig.return_annotation
    sig = sig.replace(parameters=params, return_annotation=_Raw(ret) if isinstance(ret, str) else ret)
    text = _plain(str(sig))
    if width is None or len(text) <= width or not params:
        return text
    shown = _plain(str(sig.replace(parameters=[])))  # "()" or "() -> R"
    lines = [_plain(str(p)) for p in params]
    for i, p in enumerate(params):  # the bare "*" before the first keyword-only parameter (none after "*args")
        if p.kind == p.KEYWORD_ONLY and (i == 0 or params[i - 1].kind not in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)):
            lines[i] = "*, " + lines[i]
    return "(\n" + "".join(f"    {line},\n" for line in lines) + shown[1:]


def paragraphs(obj: object) -> list[str]:
    """The docstring of ``obj`` (a class: its own, not inherited nor a dataclass's generated one) in paragraphs,
    blank lines apart."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or (inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(")):
        return []
    return [p.strip() for p in re.split(r"\n\s*\n", inspect.cleandoc(doc)) if p.strip()]


def attributes(obj: type) -> list[str]:
    """A class docstring's ``Attributes:`` section as Markdown list items."""
    return [f"- `{name}`: {text}" for name, text in field_docs(obj).items()]


def _summary(obj: object) -> str:
    """The first paragraph of ``obj``'s docstring on one line ("" where it has none)."""
    first = paragraphs(obj)[:1]
    return " ".join(first[0].split()) if first else ""


def entry(name: str, obj: object) -> list[str]:
    """A class or function defined in the module: its heading, signature and first paragraph; a class adds its
    fields (``Attributes:``) and its own public methods and properties."""
    kind = "class" if inspect.isclass(obj) else "def"
    lines = [f"### `{name}`", "", "```python", f"{kind} {name}{signature(obj, width=100)}", "```", ""]
    lines += [_summary(obj), ""] if _summary(obj) else []
    if inspect.isclass(obj):
        fields = attributes(obj)
        lines += ["Attributes:", "", *fields, ""] if fields else []
        methods = [(m, v) for m, v in vars(obj).items() if not m.startswith("_")
                   and (inspect.isfunction(v) or isinstance(v, (classmethod, staticmethod, property)))]
        for m, v in methods:
            target = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
            shown = " (property)" if isinstance(v, property) else signature(getattr(obj, m), drop_self=True)
            lines.append(f"- `{m}{shown}`" + (f": {_summary(target)}" if _summary(target) else ""))
        lines += [""] if methods else []
    return lines


def _anchor(module_name: str) -> str:
    """The GitHub anchor of a module's heading ``## workbench.x.y``: dots dropped."""
    return module_name.replace(".", "")


def area_of(module_name: str) -> str:
    """The area whose page documents ``module_name``: the one naming the longest prefix of it."""
    best = max(((len(prefix), area) for area, (_, prefixes) in AREAS.items() for prefix in prefixes
                if module_name == prefix or module_name.startswith(prefix + ".")), default=None)
    if best is None:
        raise ValueError(f"module_name={module_name!r} is in no area: add it to AREAS in tools/docs.py")
    return best[1]


def area_page(area: str) -> Path:
    return API_DIR / f"{area}.md"


def _link(module_name: str, page: Path) -> str:
    """The link from ``page`` to ``module_name``'s section: an anchor on the same page, else the other page's."""
    target = area_page(area_of(module_name))
    where = "" if target == page else Path(os.path.relpath(target, page.parent)).as_posix()
    return f"{where}#{_anchor(module_name)}"


def _defined_in(obj: object, modules: set[str]) -> str | None:
    """The documented module that defines ``obj`` (a class or function), if any."""
    home = getattr(obj, "__module__", None) if (inspect.isclass(obj) or inspect.isfunction(obj)) else None
    return home if home in modules else None


def pointer(name: str, obj: object, home: str | None, page: Path) -> str:
    """A list item for a name documented elsewhere (a module, or a definition re-exported from its module) or
    for a constant (its type and value); links are relative to ``page``."""
    if inspect.ismodule(obj):
        return f"- `{name}`: module [`{obj.__name__}`]({_link(obj.__name__, page)})"
    if home is not None:
        return f"- `{name}`: see [`{home}`]({_link(home, page)})" + (f". {_summary(obj)}" if _summary(obj) else "")
    return f"- `{name}`: `{type(obj).__name__}` `{_short_repr(obj)}`"


def _short_repr(obj: object) -> str:
    text = _plain(repr(obj)).replace("\n", " ")
    return text if len(text) <= 100 else text[:97] + "..."


def module_section(module: ModuleType, documented: set[str], page: Path) -> list[str]:
    """A module's section: its docstring, pointers to what it re-exports, then each name it defines."""
    lines = [f"## {module.__name__}", "", *(p for par in paragraphs(module) for p in (par, "")), ""]
    names = [(name, getattr(module, name)) for name in public_names(module)]
    homes = {name: _defined_in(obj, documented) for name, obj in names}
    lines += [pointer(name, obj, homes[name], page) for name, obj in names if homes[name] != module.__name__] + [""]
    for name, obj in names:
        lines += entry(name, obj) if homes[name] == module.__name__ else []
    return lines


def api_pages() -> dict[Path, str]:
    """docs/API.md (the contents: each area, its page and its modules) and each area's page under docs/api/."""
    modules = public_modules()
    documented = {m.__name__ for m in modules}
    by_area = {area: [m for m in modules if area_of(m.__name__) == area] for area in AREAS}
    contents = ["# API reference", "",
                "Written by `make docs` (`tools/docs.py`) from the package's public names and docstrings; do not edit. "
                "`import workbench as wb` gives the names of [`workbench`](api/model.md#workbench); `help(name)` shows "
                "the same text in full. The fields of `ModelConfig` and `TrainConfig` are documented under their "
                "classes. Plain Markdown rather than an mkdocs or Sphinx site: GitHub and JupyterLab render it with no "
                "build and no extra dependency.", ""]
    pages = {}
    for area, (purpose, _) in AREAS.items():
        page = area_page(area)
        contents += [f"## [{area}](api/{page.name})", "", f"{purpose[0].upper()}{purpose[1:]}.", ""]
        contents += [f"- [`{m.__name__}`]({_link(m.__name__, API)}): {_summary(m)}" for m in by_area[area]] + [""]
        lines = [f"# API reference: {area}", "", f"{purpose[0].upper()}{purpose[1:]}. The other areas: "
                 "[contents](../API.md).", ""]
        for module in by_area[area]:
            lines += module_section(module, documented, page)
        pages[page] = _tidy(lines)
    return {API: _tidy(contents), **pages}


def _tidy(lines: list[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def index_markdown() -> str:
    """docs/README.md's text: a line per page of ``PAGES``, so a reader landing in docs/ knows where to go."""
    lines = ["# Documentation", "",
             "Every page of this folder and what it is for. Written by `make docs` (`tools/docs.py`, from its "
             "`PAGES`); do not edit.", "",
             *(f"- [{name}]({name}): {purpose}" for name, purpose in PAGES.items()), "",
             "New here? Start at the [README](../README.md). What the experiments found: [RESULTS.md](../RESULTS.md); "
             "the methods and their equations: [METHODS.md](../notebooks/METHODS.md)."]
    return "\n".join(lines) + "\n"


def generated() -> dict[Path, str]:
    """Each file ``make docs`` writes and the text the code gives it now."""
    return {**api_pages(),
            INDEX: index_markdown(),
            DOCS / "SPECIMENS.md": results_page.specimens_markdown(),
            ROOT / "RESULTS.md": results_page.results_markdown()}


def _name(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def stale(pages: dict[Path, str]) -> list[Path]:
    """The generated files missing or not what the code writes now."""
    return [path for path, text in pages.items() if not path.is_file() or path.read_text() != text]


def read_pages(pages: dict[Path, str], root: Path) -> dict[Path, str]:
    """README.md, RESULTS.md and every page of docs/ whose links are checked: the generated ones as the code writes
    them now (the reference need not be on disk), the others as they are."""
    texts = {path: path.read_text() for path in [root / "README.md", root / "RESULTS.md",
                                                 *sorted((root / "docs").glob("*.md"))] if path.is_file()}
    return texts | {path: text for path, text in pages.items() if path.suffix == ".md"}


def links(markdown: str) -> list[str]:
    """The targets of the Markdown links and images in ``markdown``, outside code (fenced blocks, `spans`)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?[^)]*\)", prose)


def dead_links(texts: dict[Path, str], root: Path) -> list[str]:
    """One line per relative link that names no file of the repository (nor a page in ``texts``): a page moved or
    renamed without its links. Web addresses and anchors within a page are not followed."""
    dead, pages, top = [], {path.resolve() for path in texts}, root.resolve()
    for path, text in texts.items():
        for target in links(text):
            file = unquote(target.split("#", 1)[0].split("?", 1)[0])
            if not file or re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                continue
            resolved = (path.parent / file).resolve()
            if not resolved.is_relative_to(top):
                dead.append(f"{_name(path, root)}: the link ({target}) leaves the repository")
            elif not (resolved.exists() or resolved in pages):
                dead.append(f"{_name(path, root)}: the link ({target}) names no file ({_name(resolved, top)})")
    return dead


def unlisted(texts: dict[Path, str], root: Path) -> list[str]:
    """One line per page of docs/ the index does not list: a page a reader of docs/ would never find."""
    index = root / "docs" / "README.md"
    return [f"{_name(path, root)} is not in the index ({_name(index, root)}): add it to PAGES in tools/docs.py"
            for path in sorted(texts) if path.parent == root / "docs" and path != index and path.name not in PAGES]


def _built(path: Path) -> bool:
    """A page of the reference (``BUILT``), which a clone has none of until ``make docs`` writes it."""
    return any(path == built or built in path.parents for built in BUILT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 also if a generated file would change")
    args = parser.parse_args(argv)
    pages = generated()
    out_of_date = stale(pages)
    problems = []
    if args.check:  # a clone has no reference: there is none to be out of date
        problems += [f"{_name(path, ROOT)} is out of date: run make docs" for path in out_of_date
                     if path.is_file() or not _built(path)]
    else:
        for path in out_of_date:
            path.parent.mkdir(exist_ok=True)  # docs/api/, which a clone lacks; docs/ and the root exist
            write_bytes_atomic(path, pages[path].encode())
        print("written: " + (", ".join(_name(path, ROOT) for path in out_of_date) or "nothing"))
    texts = read_pages(pages, ROOT)
    problems += dead_links(texts, ROOT) + unlisted(texts, ROOT)
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check and not problems:
        print("up to date: every generated page, every relative link and the index")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
