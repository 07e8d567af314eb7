// (path) -> everything the checks need about each cell: from the model (source, execution count,
// tags, outputs, errors) and the DOM (whether a widget output rendered, what it shows, its widget kinds, and
// each image's natural and drawn size: a figure drawn larger than it is, or out of its proportions, is stretched).
const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';
// ipywidgets' layout classes: containers and a slider's parts, not kinds of widget
const LAYOUT = ['container', 'box', 'vbox', 'hbox', 'gridbox', 'inline', 'hslider', 'vslider', 'readout'];
(path) => {
  const p = panel(path);
  return p.content.widgets.map((cell, i) => {
    const json = cell.model.toJSON();
    const source = cell.model.sharedModel.getSource();
    const children = [...cell.node.querySelectorAll(':scope .jp-OutputArea-child')];
    const outputs = (json.outputs || []).map((o, k) => {
      const node = children[k] ? children[k].querySelector('.jp-OutputArea-output') : null;
      const data = o.data || {};
      return {type: o.output_type, name: o.name || '', ename: o.ename || '', evalue: o.evalue || '',
              text: (typeof o.text === 'string' ? o.text : (o.text || []).join('')).slice(0, 4000),
              widget: Object.prototype.hasOwnProperty.call(data, WIDGET_MIME),
              rendered: !!(node && node.querySelector('.jupyter-widgets')),
              shown: node ? node.innerText.trim().slice(0, 300) : null,
              mimes: Object.keys(data),
              images: node ? [...node.querySelectorAll('img')].filter((img) => img.complete && img.naturalWidth)
                  .map((img) => ({natural: [img.naturalWidth, img.naturalHeight],
                                  drawn: [img.clientWidth, img.clientHeight]})) : [],
              kinds: node ? [...new Set([...node.querySelectorAll('[class*="widget-"]')].flatMap(
                  (e) => [...e.classList].filter((c) => /^widget-[a-z]+$/.test(c)).map((c) => c.slice(7))))]
                  .filter((k) => !LAYOUT.includes(k)) : []};
    });
    return {index: i, type: json.cell_type, head: source.split('\n')[0].slice(0, 80), empty: !source.trim(),
            count: json.execution_count ?? null, tags: (json.metadata && json.metadata.tags) || [], outputs};
  });
}
