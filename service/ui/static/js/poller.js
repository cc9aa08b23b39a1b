// Short polling that stops when the view is left, pauses while the tab is hidden, and ends with the tab.

/**
 * Run `task` now and then every `intervalMs` after the previous run finished, until `task` returns
 * false or `stop()` is called (with `wait`, the first run is one interval from now). While document.hidden no
 * request is made; on becoming visible it runs at once.
 * Cost: one `task` per interval per open, visible page.
 */
export function poll(task, intervalMs, { wait = false } = {}) {
  let timer = null;
  let running = false;
  let stopped = false;

  async function tick() {
    timer = null;
    if (stopped || running || document.hidden) return;
    running = true;
    let again = true;
    try {
      again = (await task()) !== false;
    } catch (error) {
      console.warn("poll failed", error);
    } finally {
      running = false;
    }
    if (!again) stop();
    else if (!stopped && !document.hidden) timer = setTimeout(tick, intervalMs);
  }

  function onVisibility() {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
    } else if (!timer && !running) tick();
  }

  function stop() {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisibility);
  }

  document.addEventListener("visibilitychange", onVisibility);
  if (wait) timer = setTimeout(tick, intervalMs);
  else tick();
  return stop;
}
