// Shared helpers: building DOM from data, calling the API, formatting.
//
// Everything the record holds was chosen, in part, by a sandboxed program
// (URLs, argv, file contents, terminal output). It reaches the page only as
// text nodes: `h` turns every string child into a text node and sets
// attributes one by one; nothing here parses markup.

/** Creates an element. `attrs`: class, text, testid, dataset keys (data-*),
 * on* (event listeners), any other attribute. Children: nodes, strings
 * (text nodes), arrays, null/undefined/false (skipped). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') el.className = Array.isArray(value) ? value.filter(Boolean).join(' ') : value;
      else if (key === 'text') el.textContent = String(value);
      else if (key === 'testid') el.dataset.testid = value;
      else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
      else if (key === 'checked' || key === 'value' || key === 'selected' || key === 'disabled' || key === 'open') el[key] = value;
      else el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, ...children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, ...child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces `el`'s children (null/undefined/false skipped, strings as text). */
export function fill(el, ...children) {
  clear(el);
  return append(el, children);
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** An error the API answered, with its status. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(path) {
  let res;
  try {
    res = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
  } catch (e) {
    throw new ApiError(0, `the console did not answer (${e.message}); is \`airlock audit serve\` still running?`);
  }
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try {
      const body = await res.json();
      if (body && typeof body.error === 'string') message = body.error;
    } catch (_) { /* not JSON: keep the status line */ }
    if (res.status === 401) {
      message = 'not authorized: open the URL with ?token= that `airlock audit serve` printed';
    }
    throw new ApiError(res.status, message);
  }
  return res;
}

/** GET a JSON endpoint (a path relative to the page, e.g. "api/sessions"). */
export async function api(path) {
  const res = await request(path);
  return res.json();
}

/** GET an endpoint as text (exports). */
export async function apiText(path) {
  const res = await request(path);
  return res.text();
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '' || v === false) continue;
    q.set(k, v === true ? '1' : String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const enc = encodeURIComponent;

// ---- formatting ----

const pad = (n, w = 2) => String(n).padStart(w, '0');

/** µs since the epoch → "2026-11-25 20:55:01 UTC"-style (UTC, no zone). */
export function fmtTime(us) {
  if (us === null || us === undefined) return '—';
  const d = new Date(us / 1000);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}

/** µs since the epoch → "20:55:01.123" (UTC). */
export function fmtClock(us) {
  if (us === null || us === undefined) return '—';
  const d = new Date(us / 1000);
  return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.${pad(d.getUTCMilliseconds(), 3)}`;
}

/** Offset from the session's start, µs → "+1.234 s". */
export function fmtOffset(us, startUs) {
  if (us === null || us === undefined || startUs === null || startUs === undefined) return '';
  const s = (us - startUs) / 1e6;
  return `+${s.toFixed(3)} s`;
}

/** Milliseconds → "340 ms", "2.41 s", "3 m 07 s", "1 h 02 m". */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(2)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${pad(Math.floor(s % 60))} s`;
  return `${Math.floor(m / 60)} h ${pad(m % 60)} m`;
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GiB`;
}

export function shortId(id) {
  return id ? String(id).slice(0, 14) : '';
}

export function shortHash(sha) {
  return sha ? String(sha).slice(0, 12) : '';
}

/** argv → one line, shell-quoted where needed (for display only). */
export function argvLine(argv) {
  if (!Array.isArray(argv)) return '';
  return argv.map(quoteArg).join(' ');
}

function quoteArg(a) {
  const s = String(a);
  if (s !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(s)) return s;
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** What ran in the sandbox: the argv after airlock's own `--`, or the
 * whole command line when there is none (proxy, sidecar). A live session
 * is shown by the server's title (its name or first step): its own
 * command line is airlock's internal serve line, kept in the details. */
export function sandboxedCommand(row) {
  if (row.mode === 'session' && row.title) return row.title;
  const argv = Array.isArray(row.command) ? row.command : null;
  if (argv) {
    const i = argv.indexOf('--');
    if (i >= 0 && i < argv.length - 1) return argvLine(argv.slice(i + 1));
  }
  return row.command_line || (argv ? argvLine(argv) : '');
}

export function basename(path) {
  if (!path) return '';
  const s = String(path);
  const i = s.lastIndexOf('/');
  return i >= 0 && i < s.length - 1 ? s.slice(i + 1) : s;
}

// ---- shared widgets ----

/** The verification badge. Green only for "intact"; anything unknown is
 * grey, never green. `v`: a row's `{outcome, first_bad_seq, summary}` or a
 * session's full verify report (`problems`). */
export function verificationBadge(v, compact) {
  const outcome = v && typeof v.outcome === 'string' ? v.outcome : null;
  if (outcome === 'intact') {
    return h('span', { class: 'badge badge-ok', testid: 'verification-badge', 'data-outcome': 'intact', title: v.summary || 'chain and signatures valid' }, '✓ verified');
  }
  if (outcome === 'incomplete') {
    return h('span', { class: 'badge badge-warn', testid: 'verification-badge', 'data-outcome': 'incomplete', title: v.summary || 'the session never finished: its tail is unsigned' }, 'incomplete');
  }
  if (outcome === 'unverified') {
    return h('span', { class: 'badge badge-warn', testid: 'verification-badge', 'data-outcome': 'unverified', title: v.summary || 'signed by a node key that is not enrolled, or was revoked' }, 'unverified');
  }
  if (outcome === 'tampered') {
    const problem = (Array.isArray(v.problems) && v.problems[0]) || v.summary || 'the record was altered';
    const seq = v.first_bad_seq;
    const head = seq !== null && seq !== undefined ? `TAMPERED — first bad event #${seq}` : 'TAMPERED';
    const text = `${head}: ${problem}`;
    return h('span', { class: ['badge', 'badge-bad', compact ? 'badge-compact' : ''], testid: 'verification-badge', 'data-outcome': 'tampered', title: v.summary || text }, compact ? head : text);
  }
  return h('span', { class: 'badge badge-neutral', testid: 'verification-badge', 'data-outcome': outcome || 'unknown' }, outcome ? `unknown: ${outcome}` : 'not verified');
}

export function verdictBadge(verdict) {
  if (!verdict) return null;
  const cls = verdict === 'deny' ? 'verdict verdict-deny' : verdict === 'report' ? 'verdict verdict-report' : 'verdict verdict-allow';
  const label = verdict === 'deny' ? 'denied' : verdict === 'allow' ? 'allowed' : verdict;
  return h('span', { class: cls, 'data-verdict': verdict }, label);
}

/** A key/value table: rows of [label, value node or text]. */
export function kvTable(rows, attrs) {
  return h('table', Object.assign({ class: 'kv' }, attrs || {}),
    h('tbody', null, rows.filter(Boolean).map(([k, v, rowAttrs]) =>
      h('tr', rowAttrs || null, h('th', { scope: 'row' }, k), h('td', null, v)))));
}

/** A value of a recorded event as text: strings as they are, the rest as JSON. */
export function valueText(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'string') return v;
  return JSON.stringify(v, null, 2);
}

export function errorBox(err, what) {
  const msg = err && err.message ? err.message : String(err);
  return h('div', { class: 'error', role: 'alert', testid: 'error' },
    h('strong', null, what ? `Could not load ${what}: ` : 'Error: '), msg);
}

export function mono(text, attrs) {
  return h('code', Object.assign({ class: 'mono' }, attrs || {}), text);
}

/** How a session ended, as airlock words it ("stopped by `airlock session
 * stop`"): its `code` spans shown as code, not as backticks. Text only:
 * the words are airlock's, but a reason may quote the sandbox. */
export function endText(text) {
  const parts = String(text ?? '').split('`');
  // An odd number of backticks leaves the last one as it is.
  if (parts.length % 2 === 0) return String(text ?? '');
  return parts.map((part, i) => (i % 2 ? h('code', null, part) : part)).filter((p) => p !== '');
}

/** `endText` as plain words, for a title. */
export function endWords(text) {
  const s = String(text ?? '');
  return s.split('`').length % 2 ? s.replaceAll('`', '') : s;
}
