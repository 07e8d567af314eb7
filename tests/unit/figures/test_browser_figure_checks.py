"""The browser check's figure rules, on the cell records its JavaScript returns (no browser needed): a figure
drawn larger than its pixels or out of proportion, and a static figure beside a live widget, are problems."""

from __future__ import annotations

from tools.browser.notebook import figure_problems


def _cell(*outputs, index=0):
    return {"index": index, "head": "show()", "outputs": list(outputs)}


def _image(natural, drawn, widget=False, rendered=False, mimes=("image/png",)):
    return {"widget": widget, "rendered": rendered, "mimes": list(mimes),
            "images": [{"natural": list(natural), "drawn": list(drawn)}]}


def test_an_image_drawn_at_or_below_its_size_is_fine():
    assert figure_problems([_cell(_image((800, 600), (800, 600)), _image((800, 600), (400, 300)))]) == []


def test_an_image_stretched_wider_or_out_of_proportion_is_named():
    wider = figure_problems([_cell(_image((300, 200), (900, 600)))])
    squeezed = figure_problems([_cell(_image((800, 600), (800, 300)), index=4)])
    assert wider == ["cell 1 ('show()'): a 300x200 px image is drawn stretched to 900x600 px"]
    assert squeezed == ["cell 5 ('show()'): a 800x600 px image is drawn stretched to 800x300 px"]


def test_a_static_figure_beside_a_live_widget_is_a_frozen_twin():
    live = {"widget": True, "rendered": True, "mimes": ["application/vnd.jupyter.widget-view+json", "image/png"],
            "images": []}
    twin = _image((400, 300), (400, 300))
    assert figure_problems([_cell(live, twin)]) == [
        "cell 1 ('show()'): a static figure is shown beside a live widget (a frozen twin)"]
    # the fallback inside the widget's own bundle is not a twin, nor is a figure without a live widget
    assert figure_problems([_cell(live)]) == figure_problems([_cell(twin)]) == []
