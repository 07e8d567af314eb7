"""Notebooks that check the checker: one whose widgets respond (must pass), one broken in known ways."""

from __future__ import annotations

from pathlib import Path


def write_selftest_notebooks(folder: Path) -> dict[str, Path]:
    """Two notebooks that exercise the checks: ``widgets`` must pass; ``broken`` must fail in known ways."""
    import nbformat

    v4 = nbformat.v4
    folder.mkdir(parents=True, exist_ok=True)
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    explorer = (
        "import ipywidgets as w\n"
        "import matplotlib.pyplot as plt\n"
        "from workbench.widgets import Explorer\n"
        "def render(power, kind):\n"
        "    fig, ax = plt.subplots(figsize=(3, 2))\n"
        "    ax.plot(range(10), [i ** power for i in range(10)], label=kind)\n"
        "    plt.close(fig)\n"
        "    return fig, f'<b>{kind}</b>: x to the power {power}'\n")
    widgets = v4.new_notebook(metadata=kernel, cells=[
        v4.new_markdown_cell("# Browser self-test: widgets that respond"),
        v4.new_code_cell("import ipywidgets as w\n"
                         "slider = w.IntSlider(value=2, min=0, max=5, description='n')\n"
                         "label = w.Label('n = 2')\n"
                         "slider.observe(lambda change: setattr(label, 'value', f\"n = {change['new']}\"), 'value')\n"
                         "w.VBox([slider, label])"),
        v4.new_code_cell(explorer + "Explorer({'power': w.IntSlider(value=3, min=1, max=3, description='power', "
                         "continuous_update=False), 'kind': w.Dropdown(options=['a', 'b'], description='kind')}, "
                         "render)"),
        v4.new_code_cell(explorer + "Explorer({'kind': w.Dropdown(options=['a', 'b', 'c'], description='kind')}, "
                         "lambda kind: render(2, kind))"),
        v4.new_code_cell("print('done')"),
    ])
    broken = v4.new_notebook(metadata=kernel, cells=[
        v4.new_code_cell("import ipywidgets as w\n"
                         "w.VBox([w.IntSlider(value=1, max=3, description='dead'), w.Label('never changes')])"),
        v4.new_code_cell("import io\n"
                         "import ipywidgets as w\n"
                         "from PIL import Image\n"
                         "buffer = io.BytesIO()\n"
                         "Image.new('RGB', (60, 40), 'navy').save(buffer, format='png')\n"
                         "w.Image(value=buffer.getvalue(), layout=w.Layout(width='600px', height='40px'))"),
        v4.new_code_cell("from IPython.display import Image as Png, display\n"
                         "display(w.Label('live'))\n"
                         "display(Png(buffer.getvalue()))"),
        v4.new_code_cell("1 / 0"),
        v4.new_code_cell("print('not reached')"),
    ])
    paths = {"widgets": folder / "widgets.ipynb", "broken": folder / "broken.ipynb"}
    nbformat.write(widgets, paths["widgets"])
    nbformat.write(broken, paths["broken"])
    return paths
