// (element) -> the control to move: the first enabled slider handle, else the first enabled dropdown
// menu; null when there is none. (Other controls - toggle buttons, list boxes, text - only have to
// render; the workbench uses none.)
(el) => {
  for (const h of el.querySelectorAll('.widget-slider .noUi-handle')) {
    const target = h.closest('.noUi-target'), box = h.closest('.widget-slider');
    if (target.hasAttribute('disabled') || box.classList.contains('mod-disabled')) continue;
    const label = box.querySelector('.widget-label');
    return {kind: 'slider', index: [...el.querySelectorAll('.widget-slider .noUi-handle')].indexOf(h),
            label: label ? label.textContent.trim() : '', now: h.getAttribute('aria-valuenow'),
            text: h.getAttribute('aria-valuetext'), min: h.getAttribute('aria-valuemin'),
            max: h.getAttribute('aria-valuemax')};
  }
  const selects = [...el.querySelectorAll('.widget-dropdown select')];
  for (const s of selects) {
    if (s.disabled || s.options.length < 2) continue;
    const label = s.closest('.widget-dropdown').querySelector('.widget-label');
    return {kind: 'menu', index: selects.indexOf(s), label: label ? label.textContent.trim() : '',
            now: String(s.selectedIndex), text: s.value, last: s.selectedIndex >= s.options.length - 1};
  }
  return null;
}
