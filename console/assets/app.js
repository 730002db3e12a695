// The console's entry point: hash routing to one page at a time.
//
// Routes (docs/console.md): #/ sessions, #/s/ID session, #/s/ID/e/SEQ event,
// #/s/ID/files files, #/s/ID/tools MCP tool calls, #/s/ID/terminal terminal. A route may carry a query
// after `?` (filters, the selected file), so a link names what it shows.

import { h, clear, append, shortId } from './util.js';
import { renderSessions } from './sessions.js';
import { renderSession } from './session.js';
import { renderEvent } from './event.js';
import { renderFiles } from './files.js';
import { renderTools } from './tools.js';
import { renderTerminal } from './terminal.js';

// The token arrived in the address bar; the server has swapped it for a
// cookie. Drop it from the bar (and so from history and screenshots).
if (new URLSearchParams(location.search).has('token')) {
  history.replaceState(null, '', location.pathname + location.hash);
}

let cleanup = null;
let generation = 0;

/** "#/s/ID/files?path=x" → { parts: ["s","ID","files"], params } */
export function parseHash(hash) {
  const raw = (hash || '').replace(/^#/, '');
  const q = raw.indexOf('?');
  const path = q >= 0 ? raw.slice(0, q) : raw;
  const params = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, params };
}

function crumbs(items) {
  const nav = document.getElementById('crumbs');
  clear(nav);
  items.forEach((item, i) => {
    if (i > 0) nav.appendChild(h('span', { class: 'crumb-sep', 'aria-hidden': 'true' }, '›'));
    nav.appendChild(item.href
      ? h('a', { href: item.href, class: 'crumb' }, item.label)
      : h('span', { class: 'crumb crumb-current' }, item.label));
  });
}

async function route() {
  const gen = ++generation;
  if (cleanup) {
    try { cleanup(); } catch (_) { /* a page's cleanup must not break navigation */ }
    cleanup = null;
  }
  const main = document.getElementById('app');
  const { parts, params } = parseHash(location.hash);
  const page = h('div', { class: 'page' });
  const ctx = {
    params,
    // A page checks this after each await: a newer navigation won.
    stale: () => gen !== generation,
    onCleanup: (fn) => { const prev = cleanup; cleanup = () => { fn(); if (prev) prev(); }; },
  };
  clear(main);
  main.appendChild(page);
  document.body.dataset.route = parts[0] === 's' ? (parts[2] || 'session') : 'sessions';

  try {
    if (parts.length === 0) {
      crumbs([{ label: 'Sessions' }]);
      document.title = 'Sessions — Airlock console';
      await renderSessions(page, ctx);
    } else if (parts[0] === 's' && parts[1]) {
      const id = parts[1];
      const sessionCrumb = { label: `Session ${shortId(id)}`, href: `#/s/${encodeURIComponent(id)}` };
      if (parts.length === 2) {
        crumbs([{ label: 'Sessions', href: '#/' }, { label: sessionCrumb.label }]);
        document.title = `Session ${shortId(id)} — Airlock console`;
        await renderSession(page, id, ctx);
      } else if (parts[2] === 'e' && parts[3]) {
        crumbs([{ label: 'Sessions', href: '#/' }, sessionCrumb, { label: `Event #${parts[3]}` }]);
        document.title = `Event #${parts[3]} — Airlock console`;
        await renderEvent(page, id, parts[3], ctx);
      } else if (parts[2] === 'files') {
        crumbs([{ label: 'Sessions', href: '#/' }, sessionCrumb, { label: 'Files' }]);
        document.title = `Files — session ${shortId(id)} — Airlock console`;
        await renderFiles(page, id, ctx);
      } else if (parts[2] === 'tools') {
        crumbs([{ label: 'Sessions', href: '#/' }, sessionCrumb, { label: 'Tool calls' }]);
        document.title = `Tool calls — session ${shortId(id)} — Airlock console`;
        await renderTools(page, id, ctx);
      } else if (parts[2] === 'terminal') {
        crumbs([{ label: 'Sessions', href: '#/' }, sessionCrumb, { label: 'Terminal' }]);
        document.title = `Terminal — session ${shortId(id)} — Airlock console`;
        await renderTerminal(page, id, ctx);
      } else {
        notFound(page);
      }
    } else {
      notFound(page);
    }
  } catch (err) {
    if (ctx.stale()) return;
    console.warn('page failed', err);
    append(page, h('div', { class: 'error', role: 'alert', testid: 'error' },
      h('strong', null, 'Could not show this page: '), err && err.message ? err.message : String(err)));
  }
  if (!ctx.stale()) document.body.dataset.ready = 'true';
}

function notFound(page) {
  crumbs([{ label: 'Sessions', href: '#/' }, { label: 'Not found' }]);
  append(page, h('div', { class: 'error', role: 'alert', testid: 'error' },
    'No such page. ', h('a', { href: '#/' }, 'Back to the sessions.')));
}

window.addEventListener('hashchange', () => {
  delete document.body.dataset.ready;
  route();
});
route();
