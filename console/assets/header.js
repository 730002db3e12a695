// A session's header (command, policy, limits, duration, end, verification)
// and the tabs between its pages, shared by the session, files and terminal
// pages.

import {
  h, enc, sandboxedCommand, fmtTime, fmtDuration, verificationBadge, kvTable, mono, shortHash, endText,
} from './util.js';

export function sessionHeader(s) {
  const running = s.end === null || s.end === undefined;
  const policy = h('details', { class: 'policy', testid: 'policy-details' },
    h('summary', null,
      h('span', { class: 'mono', testid: 'policy-name' }, s.policy_name || '(none)'),
      ' ',
      h('span', { class: 'mono muted', testid: 'policy-sha256', title: s.policy_sha256 || '' }, `sha256 ${s.policy_sha256 || '—'}`),
      h('span', { class: 'details-hint' }, 'show policy')),
    h('pre', { class: 'code policy-text', testid: 'policy-text' }, s.policy_text || '(empty policy: deny everything)'));

  let endNode;
  if (running) {
    endNode = h('span', { class: 'live-indicator', testid: 'session-running' }, 'running');
  } else {
    const failed = s.exit_status !== 0 && s.exit_status !== undefined;
    endNode = h('span', { class: failed ? 'mono end-failed' : 'mono', testid: 'session-end' }, endText(s.end));
  }

  const rows = [
    ['Policy', policy, { class: 'full' }],
    ['Limits', s.limits_summary ? mono(s.limits_summary, { testid: 'session-limits' }) : h('span', { class: 'muted', testid: 'session-limits' }, 'none set')],
    ['Started', h('span', null, `${fmtTime(s.started_us)} UTC`)],
    ['Duration', h('span', { testid: 'session-duration' }, running ? 'still running' : fmtDuration(s.duration_ms))],
    ['End', endNode],
    ['Mode', h('span', { testid: 'session-mode' }, modeText(s))],
    ['Isolation', h('span', { testid: 'session-isolation' }, s.isolation || 'namespaces')],
    ['Host', mono(`${s.host || '—'}`)],
    ['Signed by', h('span', { class: 'mono muted', title: s.key_fingerprint || '' }, s.key_fingerprint ? `key ${shortHash(s.key_fingerprint.replace(/^[^:]*:/, ''))}…` : '—',
      s.verification && s.verification.key_trust && s.verification.key_trust.status === 'trusted'
        ? h('span', { class: 'trusted', testid: 'key-trust', 'data-trust': 'trusted' }, ' (the trusted key)') : null,
      s.airlock_version ? ` · airlock ${s.airlock_version}` : ''), { class: 'wide' }],
    s.capabilities_note ? ['Note', h('span', { class: 'note' }, s.capabilities_note), { class: 'full' }] : null,
  ];

  const v = s.verification || {};
  const title = h('h1', { class: 'mono cmd-title clamp', testid: 'session-command', title: 'click to unfold' }, sandboxedCommand(s) || '(no command)');
  title.addEventListener('click', () => title.classList.toggle('clamp'));
  const vText = v.summary ? (typeof v.summary === 'string' ? v.summary : null) : null;
  return h('section', { class: 'card session-head', testid: 'session-header' },
    h('div', { class: 'session-title' },
      title,
      verificationBadge(v)),
    invocation(s),
    v.outcome === 'tampered' && Array.isArray(v.problems) && v.problems.length > 1
      ? h('ul', { class: 'problems', testid: 'verification-problems' }, v.problems.map((p) => h('li', null, p)))
      : null,
    vText ? h('p', { class: 'muted small', testid: 'verification-summary' }, vText) : null,
    trustNote(v),
    kvTable(rows, { class: 'kv session-meta' }));
}

/** "session (3 steps)": a live session's page keeps it current as its
 * steps start (session.js). */
export function modeText(s) {
  const steps = s.steps !== null && s.steps !== undefined ? ` (${s.steps} ${s.steps === 1 ? 'step' : 'steps'})` : '';
  return `${s.mode || '—'}${steps}`;
}

/** Whose signature the badge checked: a green badge over an unchecked
 * signer proves consistency only. */
function trustNote(v) {
  const trust = v.key_trust && v.key_trust.status;
  if (trust === 'trusted') return null; // said in the "Signed by" row
  if (trust === 'unchecked') {
    return h('p', { class: 'small trust trust-warn', testid: 'key-trust', 'data-trust': 'unchecked' },
      'Signer not checked: no trusted key was given (airlock audit serve --audit-key), so a rewritten and re-signed record would also pass.');
  }
  if (trust === 'untrusted') {
    return h('p', { class: 'small trust trust-bad', testid: 'key-trust', 'data-trust': 'untrusted' },
      `Signed by a key that is not the trusted one (trusted: ${v.key_trust.trusted_fingerprint || '?'}).`);
  }
  return null;
}

/** Airlock's own command line, folded to two lines until asked for. */
function invocation(s) {
  if (!s.command_line) return null;
  const line = h('code', { class: 'mono invocation clamp', testid: 'session-invocation' }, s.command_line);
  const more = h('button', { type: 'button', class: 'btn btn-small btn-link', testid: 'invocation-toggle' }, 'show all');
  more.addEventListener('click', () => {
    const folded = line.classList.toggle('clamp');
    more.textContent = folded ? 'show all' : 'fold';
  });
  return h('div', { class: 'invocation-row' }, h('span', { class: 'muted small' }, 'as run: '), line, s.command_line.length > 160 ? more : null);
}

/** Tabs between a session's pages and its export links. */
export function sessionTabs(id, active) {
  const tab = (key, label, href) => h('a', {
    class: ['tab', key === active ? 'active' : ''], href, testid: `tab-${key}`,
    'aria-current': key === active ? 'page' : null,
  }, label);
  const exp = (fmt, label, title) => h('a', {
    class: 'export', href: `api/sessions/${enc(id)}/export/${fmt}`, download: '', testid: `export-${fmt}`, title,
  }, label);
  return h('nav', { class: 'tabs', 'aria-label': 'Session pages' },
    tab('session', 'Timeline', `#/s/${enc(id)}`),
    tab('files', 'Files', `#/s/${enc(id)}/files`),
    tab('tools', 'Tool calls', `#/s/${enc(id)}/tools`),
    tab('terminal', 'Terminal', `#/s/${enc(id)}/terminal`),
    h('span', { class: 'tabs-spacer' }),
    h('span', { class: 'exports', testid: 'exports' }, h('span', { class: 'muted' }, 'Export'),
      exp('har', 'HAR', 'the HTTP exchanges as a HAR file'),
      exp('jsonl', 'JSONL', 'every event, one JSON object a line'),
      exp('cast', 'asciicast', 'the terminal output, for asciinema')));
}
