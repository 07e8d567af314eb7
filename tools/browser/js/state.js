// (path) -> whether the notebook is open and its kernel ready, the kernel's status, an open dialog,
// and which cells show [*]: what the waits poll.
(path) => {
  const p = panel(path);
  if (!p || !p.context.isReady) return {ready: false};
  const sc = p.sessionContext;
  const cells = p.content.widgets.map((cell) => {
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    return {type: cell.model.type, empty: !cell.model.sharedModel.getSource().trim(),
            prompt: prompt ? prompt.textContent.trim() : ''};
  });
  return {ready: true, kernel: !!(sc.session && sc.session.kernel), status: sc.kernelDisplayStatus,
          dialog: !!document.querySelector('.jp-Dialog'),
          running: cells.map((c, i) => c.prompt.includes('*') ? i : -1).filter((i) => i >= 0), n: cells.length};
}
