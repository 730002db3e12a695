// Following a running session: server-sent events from
// api/sessions/ID/live?after=SEQ, one `ev` per new record and `end` when the
// session ends. A dropped stream is reopened after the last event seen, so
// nothing is shown twice or missed.

import {
  h, fill, enc,
} from './util.js';

/** Follows session `id`; `lastSeq()` names the newest event the page has.
 * Returns a function that stops following. */
export function followLive(id, lastSeq, { indicator, onEvent, onEnd }) {
  let source = null;
  let retry = null;
  let stopped = false;
  const dot = h('span', { class: 'live-indicator', testid: 'live-indicator', role: 'status' }, 'live');
  fill(indicator, dot);

  const open = () => {
    if (stopped) return;
    source = new EventSource(`api/sessions/${enc(id)}/live?after=${enc(lastSeq())}`);
    source.addEventListener('ev', (msg) => {
      let e;
      try { e = JSON.parse(msg.data); } catch (_) { return; }
      if (e && typeof e.seq === 'number') onEvent(e);
    });
    source.addEventListener('end', () => {
      stop();
      dot.className = 'ended-indicator';
      dot.dataset.testid = 'live-ended';
      dot.textContent = 'session ended';
      if (onEnd) onEnd();
    });
    source.addEventListener('open', () => {
      dot.classList.remove('live-lost');
      dot.textContent = 'live';
      dot.dataset.state = 'open';
    });
    source.addEventListener('error', () => {
      // EventSource would reconnect with the URL it was opened with (an
      // old `after`); reopen it ourselves instead.
      if (stopped) return;
      source.close();
      dot.classList.add('live-lost');
      dot.dataset.state = 'reconnecting';
      dot.textContent = 'reconnecting…';
      retry = setTimeout(open, 1000);
    });
  };

  function stop() {
    stopped = true;
    if (retry) clearTimeout(retry);
    if (source) source.close();
  }

  open();
  return stop;
}
