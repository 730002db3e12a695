// Terminal playback of the session's asciicast export: play, pause, seek.
// Seeking replays the output from the start up to that moment, as the
// terminal drew it.

import {
  h, append, api, apiText, enc, errorBox,
} from './util.js';
import { sessionHeader, sessionTabs } from './header.js';
import { Screen } from './ansi.js';

/** Parses asciicast v2 (absolute times) or v3 (intervals): the header and
 * the output events as [seconds, text]. */
export function parseCast(text) {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length === 0) return { header: {}, events: [] };
  let header = {};
  try { header = JSON.parse(lines[0]); } catch (_) { throw new Error('the asciicast export has no header line'); }
  const v3 = header.version === 3;
  const events = [];
  let t = 0;
  for (let i = 1; i < lines.length; i++) {
    let ev;
    try { ev = JSON.parse(lines[i]); } catch (_) { continue; }
    if (!Array.isArray(ev) || ev.length < 3) continue;
    const time = Number(ev[0]);
    if (!Number.isFinite(time)) continue;
    t = v3 ? t + time : time;
    if (ev[1] === 'o' && typeof ev[2] === 'string') events.push([t, ev[2]]);
  }
  return { header, events };
}

function fmtSecs(s) {
  const m = Math.floor(s / 60);
  const sec = s - m * 60;
  return `${m}:${sec.toFixed(1).padStart(4, '0')}`;
}

export async function renderTerminal(page, id, ctx) {
  const [s, castText] = await Promise.all([
    api(`api/sessions/${enc(id)}`),
    apiText(`api/sessions/${enc(id)}/export/cast`).catch((err) => ({ error: err })),
  ]);
  if (ctx.stale()) return;
  append(page, sessionHeader(s), sessionTabs(id, 'terminal'));
  if (typeof castText !== 'string') {
    append(page, errorBox(castText.error, 'the terminal recording'));
    return;
  }
  const { header, events } = parseCast(castText);
  const cols = header.width || (header.term && header.term.cols) || 80;
  const rows = header.height || (header.term && header.term.rows) || 24;
  const total = events.length ? events[events.length - 1][0] : 0;

  const screen = new Screen(cols, rows);
  const pre = h('pre', { class: 'terminal', testid: 'terminal-screen', tabindex: '0', 'aria-label': 'Terminal output' });
  const playBtn = h('button', { type: 'button', class: 'btn btn-primary play', testid: 'terminal-play', 'aria-label': 'Play' }, '▶ Play');
  const slider = h('input', { type: 'range', class: 'seek', testid: 'terminal-seek', min: '0', max: String(Math.ceil(total * 1000)), step: '1', value: String(Math.ceil(total * 1000)), 'aria-label': 'Position' });
  const timeText = h('span', { class: 'mono time', testid: 'terminal-time' });
  const speed = h('select', { class: 'speed', testid: 'terminal-speed', 'aria-label': 'Speed' },
    ['1', '2', '4', '8'].map((v) => h('option', { value: v }, `${v}×`)));

  append(page, h('section', { class: 'card terminal-card' },
    h('div', { class: 'card-head' }, h('h2', null, 'Terminal'),
      h('span', { class: 'muted small' }, `${cols}×${rows} · ${events.length} output chunk${events.length === 1 ? '' : 's'} · ${fmtSecs(total)}`)),
    h('div', { class: 'player-controls' }, playBtn, slider, timeText, speed),
    events.length === 0
      ? h('p', { class: 'muted', testid: 'terminal-empty' }, 'No terminal output was recorded.')
      : null,
    h('div', { class: 'terminal-wrap' }, pre)));

  // Player state: the output applied so far is events[0..next).
  let next = 0;
  let pos = total; // seconds
  let playing = false;
  let raf = null;
  let wallStart = 0;
  let posStart = 0;

  function applyTo(t) {
    if (next > 0 && events[next - 1][0] > t) {
      screen.reset();
      next = 0;
    }
    let changed = false;
    while (next < events.length && events[next][0] <= t) {
      screen.feed(events[next][1]);
      next++;
      changed = true;
    }
    return changed;
  }

  function show(t, force) {
    pos = Math.max(0, Math.min(total, t));
    const rewound = next > 0 && events[next - 1][0] > pos;
    if (applyTo(pos) || rewound || force) screen.render(pre);
    slider.value = String(pos >= total ? Math.ceil(total * 1000) : Math.floor(pos * 1000));
    timeText.textContent = `${fmtSecs(pos)} / ${fmtSecs(total)}`;
    pre.dataset.position = String(pos);
    pre.dataset.atEnd = pos >= total ? 'true' : 'false';
  }

  function frame(now) {
    const t = posStart + ((now - wallStart) / 1000) * Number(speed.value);
    if (t >= total) {
      show(total);
      pause();
      return;
    }
    show(t);
    raf = requestAnimationFrame(frame);
  }

  function play() {
    if (events.length === 0) return;
    if (pos >= total) {
      // From the start: an empty screen, then the output as it came.
      screen.reset();
      next = 0;
      show(0, true);
    }
    playing = true;
    playBtn.textContent = '❚❚ Pause';
    playBtn.setAttribute('aria-label', 'Pause');
    playBtn.dataset.state = 'playing';
    wallStart = performance.now();
    posStart = pos;
    raf = requestAnimationFrame(frame);
  }

  function pause() {
    playing = false;
    if (raf) cancelAnimationFrame(raf);
    raf = null;
    playBtn.textContent = '▶ Play';
    playBtn.setAttribute('aria-label', 'Play');
    playBtn.dataset.state = 'paused';
  }

  playBtn.addEventListener('click', () => (playing ? pause() : play()));
  slider.addEventListener('input', () => {
    const v = Number(slider.value);
    // The slider counts whole milliseconds: its end is the recording's end.
    show(v >= Number(slider.max) ? total : v / 1000);
    if (playing) { wallStart = performance.now(); posStart = pos; }
  });
  speed.addEventListener('change', () => { if (playing) { wallStart = performance.now(); posStart = pos; } });
  pre.addEventListener('keydown', (e) => {
    if (e.key === ' ') { e.preventDefault(); if (playing) pause(); else play(); }
  });

  playBtn.dataset.state = 'paused';
  show(total, true);
  ctx.onCleanup(() => { if (raf) cancelAnimationFrame(raf); });
}
