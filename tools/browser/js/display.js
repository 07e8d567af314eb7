// (element) -> what a widget shows apart from its controls: its text, and a fingerprint of each
// image's source. The controls are removed first, so a slider's own readout moving does not count
// as the widget responding.
const CONTROLS = ['.widget-slider', '.widget-dropdown', '.widget-select', '.widget-select-multiple',
                  '.widget-toggle-buttons', '.widget-radio', '.widget-checkbox', '.widget-toggle-button',
                  '.widget-text', '.widget-textarea', '.widget-button', '.widget-play', '.widget-colorpicker',
                  '.widget-datepicker'].join(', ');
(el) => {
  const clone = el.cloneNode(true);
  clone.querySelectorAll(CONTROLS).forEach((c) => c.remove());
  const hash = (s) => {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
    return s.length + ':' + (h >>> 0).toString(16);
  };
  return {text: clone.textContent.replace(/\s+/g, ' ').trim(),
          images: [...el.querySelectorAll('img')].map((i) => hash(i.getAttribute('src') || ''))};
}
