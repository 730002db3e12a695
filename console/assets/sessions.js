// The sessions page: filters, a sortable table, and the cross-session
// search (`airlock audit search`), whose hits link to their events.

import {
  h, append, fill, clear, api, query, enc, fmtTime, fmtDuration, shortId, verificationBadge, errorBox, fmtClock, sandboxedCommand, endText, endWords,
} from './util.js';

const FILTERS = ['since', 'until', 'mode', 'node', 'label', 'command', 'host', 'denied', 'verification'];
const SEARCH = ['s_host', 's_url', 's_method', 's_verdict', 's_file', 's_command', 's_since', 's_until'];

/** Sortable columns: key, label, value to sort by, cell. */
const COLUMNS = [
  { key: 'started', label: 'Started (UTC)', value: (r) => r.started_us, cell: (r) => h('span', { class: 'nowrap' }, fmtTime(r.started_us)) },
  { key: 'duration', label: 'Duration', num: true, value: (r) => r.duration_ms ?? -1, cell: (r) => r.end === null || r.end === undefined ? h('span', { class: 'live-dot', title: 'still running' }, 'running') : fmtDuration(r.duration_ms) },
  { key: 'mode', label: 'Mode', value: (r) => r.mode || '', cell: (r) => r.mode || '—' },
  { key: 'isolation', label: 'Isolation', value: (r) => r.isolation || 'namespaces', cell: (r) => h('span', { testid: 'session-isolation' }, r.isolation || 'namespaces') },
  { key: 'node', label: 'Node', value: (r) => r.node || '', cell: (r) => h('span', { class: 'mono', testid: 'session-node' }, r.node || '—') },
  { key: 'labels', label: 'Labels', value: (r) => labelPairs(r).join(','), cell: (r) => labelsCell(r) },
  { key: 'command', label: 'Command', value: (r) => sandboxedCommand(r), cell: (r) => h('a', { class: 'mono cmd', href: `#/s/${enc(r.id)}`, testid: 'session-link', title: r.command_line || '' }, sandboxedCommand(r) || '(no command)') },
  { key: 'policy', label: 'Policy', value: (r) => r.policy_name || '', cell: (r) => h('span', { class: 'mono' }, r.policy_name || '—') },
  { key: 'end', label: 'End', value: (r) => r.end || '', cell: (r) => endCell(r) },
  { key: 'events', label: 'Events', num: true, value: (r) => r.events ?? 0, cell: (r) => String(r.events ?? 0) },
  { key: 'denials', label: 'Denials', num: true, value: (r) => r.denials ?? 0, cell: (r) => r.denials ? h('span', { class: 'count-deny' }, String(r.denials)) : '0' },
  { key: 'verification', label: 'Verification', value: (r) => verificationRank(r.verification), cell: (r) => verificationBadge(r.verification, true) },
];

function verificationRank(v) {
  const o = v && v.outcome;
  return o === 'tampered' ? 0 : o === 'unverified' ? 1 : o === 'incomplete' ? 2 : o === 'intact' ? 3 : 4;
}

/** A session's labels as `key=value`, by key (empty for a session
 * recorded before labels existed). */
function labelPairs(r) {
  return Object.entries(r.labels || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => `${k}=${v}`);
}

/** One chip a label; clicking one filters the list by it (the click is
 * the chip's, not the row's). */
function labelsCell(r) {
  const pairs = labelPairs(r);
  if (pairs.length === 0) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'labels-cell' }, pairs.map((pair) => h('button', {
    type: 'button', class: 'label-chip mono', testid: 'label-chip', title: `only sessions labelled ${pair}`,
    onclick: (e) => { e.stopPropagation(); document.dispatchEvent(new CustomEvent('airlock-label-filter', { detail: pair })); },
  }, pair)));
}

function endCell(r) {
  if (r.end === null || r.end === undefined) return h('span', { class: 'muted' }, 'running');
  const failed = r.exit_status !== 0;
  // One line, cut with an ellipsis; the whole of it in the title.
  return h('span', { class: ['end-cell', failed ? 'end-failed' : ''], testid: 'session-end-cell', title: endWords(r.end) }, endText(r.end));
}

export async function renderSessions(page, ctx) {
  const params = ctx.params;
  const state = {
    sort: params.get('sort') || 'started',
    dir: params.get('dir') || 'desc',
    rows: [],
  };

  // ---- filters ----
  const inputs = {};
  const text = (name, label, placeholder) => {
    inputs[name] = h('input', { type: 'text', id: `f-${name}`, name, testid: `filter-${name}`, placeholder, value: params.get(name) || '', autocomplete: 'off', spellcheck: 'false' });
    return h('label', { class: 'field', for: `f-${name}` }, h('span', null, label), inputs[name]);
  };
  const select = (name, label, options) => {
    inputs[name] = h('select', { id: `f-${name}`, name, testid: `filter-${name}` },
      options.map(([v, l]) => h('option', { value: v, selected: (params.get(name) || '') === v }, l)));
    return h('label', { class: 'field', for: `f-${name}` }, h('span', null, label), inputs[name]);
  };
  inputs.denied = h('input', { type: 'checkbox', id: 'f-denied', name: 'denied', testid: 'filter-denied', checked: params.get('denied') === '1' });

  const filterBar = h('div', { class: 'filters', testid: 'session-filters', role: 'search' },
    text('since', 'Since', '2h or RFC 3339'),
    text('until', 'Until', 'RFC 3339 or 30m'),
    select('mode', 'Mode', [['', 'any'], ['run', 'run'], ['proxy', 'proxy'], ['sidecar', 'sidecar'], ['session', 'session']]),
    text('node', 'Node', 'the host that recorded it'),
    text('label', 'Label', 'KEY=VALUE'),
    text('command', 'Command', 'text in any command'),
    text('host', 'Host contacted', '*.example.com'),
    h('label', { class: 'field field-check', for: 'f-denied' }, inputs.denied, h('span', null, 'with a denial')),
    select('verification', 'Verification', [['', 'any'], ['intact', 'verified'], ['incomplete', 'incomplete'], ['unverified', 'unverified'], ['tampered', 'tampered']]),
    h('div', { class: 'field field-buttons' },
      h('button', { type: 'button', class: 'btn btn-primary', testid: 'filter-apply', onclick: () => apply() }, 'Apply'),
      h('button', { type: 'button', class: 'btn', testid: 'filter-clear', onclick: () => { for (const n of FILTERS) { if (n === 'denied') inputs.denied.checked = false; else inputs[n].value = ''; } apply(); } }, 'Clear')));

  // A label chip in the table sets the label filter.
  const onChip = (e) => { inputs.label.value = e.detail; apply(); };
  document.addEventListener('airlock-label-filter', onChip);
  ctx.onCleanup(() => document.removeEventListener('airlock-label-filter', onChip));

  for (const n of FILTERS) {
    const el = inputs[n];
    if (el.tagName === 'SELECT' || el.type === 'checkbox') el.addEventListener('change', () => apply());
    else el.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
  }

  const status = h('p', { class: 'muted table-status', testid: 'sessions-status' });
  const table = h('table', { class: 'grid sessions', testid: 'sessions-table' });
  const listBox = h('div', { class: 'table-wrap' }, table);

  // ---- search ----
  const sInputs = {};
  const sText = (name, label, placeholder) => {
    sInputs[name] = h('input', { type: 'text', id: `q-${name}`, name, testid: `search-${name.slice(2)}`, placeholder, value: params.get(name) || '', autocomplete: 'off', spellcheck: 'false' });
    sInputs[name].addEventListener('keydown', (e) => { if (e.key === 'Enter') runSearch(); });
    return h('label', { class: 'field', for: `q-${name}` }, h('span', null, label), sInputs[name]);
  };
  sInputs.s_verdict = h('select', { id: 'q-s_verdict', name: 's_verdict', testid: 'search-verdict' },
    [['', 'any'], ['allow', 'allow'], ['deny', 'deny'], ['report', 'report']].map(([v, l]) => h('option', { value: v, selected: (params.get('s_verdict') || '') === v }, l)));
  const searchBar = h('div', { class: 'filters', testid: 'search-form', role: 'search' },
    sText('s_host', 'Host', '*.example.com'),
    sText('s_url', 'URL contains', '/v1/upload'),
    sText('s_method', 'Method', 'POST'),
    h('label', { class: 'field', for: 'q-s_verdict' }, h('span', null, 'Verdict'), sInputs.s_verdict),
    sText('s_file', 'File', '/etc/passwd or /work/'),
    sText('s_command', 'Command', 'curl'),
    sText('s_since', 'Since', '24h'),
    sText('s_until', 'Until', 'RFC 3339'),
    h('div', { class: 'field field-buttons' },
      h('button', { type: 'button', class: 'btn btn-primary', testid: 'search-run', onclick: () => runSearch() }, 'Search')));
  const searchResults = h('div', { class: 'search-results', testid: 'search-results' });

  // The search first: under a long list nobody would find it.
  append(page,
    h('section', { class: 'card', testid: 'search-card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Search every session'),
        h('p', { class: 'muted' }, 'The same search as ', h('code', null, 'airlock audit search'), ': every filter given must match.')),
      searchBar,
      searchResults),
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h1', null, 'Sessions'), status),
      filterBar,
      listBox));

  function currentFilters() {
    const f = {};
    for (const n of FILTERS) f[n] = n === 'denied' ? inputs.denied.checked : inputs[n].value.trim();
    return f;
  }

  /** Writes filters and sort into the hash (so the view can be shared) and reloads. */
  function apply() {
    const f = currentFilters();
    const s = {};
    for (const n of SEARCH) {
      const v = sInputs[n].value.trim();
      if (v) s[n] = v;
    }
    const q = query(Object.assign({}, f, s, state.sort !== 'started' || state.dir !== 'desc' ? { sort: state.sort, dir: state.dir } : {}));
    const target = `#/${q}`;
    if (location.hash !== target) {
      history.replaceState(null, '', target);
    }
    load();
  }

  let loadSeq = 0;
  let lastJson = '';
  let poll = null;

  /** Fetches the list; `quiet` (the refresh while a session runs) neither
   * says "Loading…" nor redraws when nothing changed. */
  async function load(quiet) {
    const mine = ++loadSeq;
    if (!quiet) status.textContent = 'Loading…';
    table.setAttribute('aria-busy', 'true');
    try {
      const f = currentFilters();
      const data = await api(`api/sessions${query(f)}`);
      // A newer load (another filter) or page won: this answer is stale.
      if (ctx.stale() || mine !== loadSeq) return;
      const json = JSON.stringify(data.sessions);
      if (quiet && json === lastJson) return;
      lastJson = json;
      state.rows = Array.isArray(data.sessions) ? data.sessions : [];
      const n = state.rows.length;
      const filtered = FILTERS.some((k) => f[k]);
      status.textContent = `${n} session${n === 1 ? '' : 's'}${filtered ? ' match the filters' : ''}`;
      fill(listBox, table);
      drawTable();
    } catch (err) {
      if (ctx.stale() || mine !== loadSeq) return;
      status.textContent = '';
      clear(table);
      fill(listBox, errorBox(err, 'the sessions'), table);
    } finally {
      if (mine === loadSeq) {
        table.removeAttribute('aria-busy');
        table.dataset.loaded = 'true';
        schedulePoll();
      }
    }
  }

  /** While a listed session is still running, the list refreshes itself. */
  function schedulePoll() {
    if (poll) clearTimeout(poll);
    poll = null;
    if (ctx.stale() || !state.rows.some((r) => r.end === null || r.end === undefined)) return;
    poll = setTimeout(() => { poll = null; if (!ctx.stale()) load(true); }, 3000);
  }
  ctx.onCleanup(() => { if (poll) clearTimeout(poll); });

  function drawTable() {
    const col = COLUMNS.find((c) => c.key === state.sort) || COLUMNS[0];
    const sign = state.dir === 'asc' ? 1 : -1;
    const rows = state.rows.slice().sort((a, b) => {
      const va = col.value(a);
      const vb = col.value(b);
      if (va < vb) return -sign;
      if (va > vb) return sign;
      return 0;
    });
    const head = h('tr', null, COLUMNS.map((c) => {
      const active = c.key === state.sort;
      const arrow = active ? (state.dir === 'asc' ? '▲' : '▼') : '↕';
      return h('th', { scope: 'col', class: [c.num ? 'num' : '', active ? 'sorted' : ''], 'aria-sort': active ? (state.dir === 'asc' ? 'ascending' : 'descending') : 'none' },
        h('button', {
          type: 'button', class: 'sort', testid: `sort-${c.key}`,
          onclick: () => {
            if (state.sort === c.key) state.dir = state.dir === 'asc' ? 'desc' : 'asc';
            else { state.sort = c.key; state.dir = c.num || c.key === 'started' ? 'desc' : 'asc'; }
            drawTable();
            const q = new URLSearchParams(location.hash.split('?')[1] || '');
            q.set('sort', state.sort);
            q.set('dir', state.dir);
            history.replaceState(null, '', `#/?${q}`);
          },
        }, c.label, h('span', { class: ['sort-arrow', active ? 'on' : ''], 'aria-hidden': 'true' }, arrow)));
    }));
    const body = h('tbody', null, rows.length === 0
      ? h('tr', null, h('td', { colspan: String(COLUMNS.length), class: 'empty' }, 'No sessions match.'))
      : rows.map((r) => h('tr', {
        class: ['session-row', r.denials ? 'has-denials' : '', r.verification && r.verification.outcome === 'tampered' ? 'is-tampered' : ''],
        testid: 'session-row', 'data-session': r.id,
        onclick: (e) => { if (!(e.target instanceof HTMLAnchorElement)) location.hash = `#/s/${enc(r.id)}`; },
      }, COLUMNS.map((c) => h('td', { class: [c.num ? 'num' : '', `col-${c.key}`] }, c.cell(r))))));
    fill(table, h('thead', null, head), body);
  }

  async function runSearch() {
    const q = {};
    let any = false;
    for (const n of SEARCH) {
      const v = sInputs[n].value.trim();
      if (v) {
        q[n.slice(2)] = v;
        if (!['s_since', 's_until'].includes(n)) any = true;
      }
    }
    // Keep the search in the hash too.
    const hq = new URLSearchParams(location.hash.split('?')[1] || '');
    for (const n of SEARCH) {
      const v = sInputs[n].value.trim();
      if (v) hq.set(n, v); else hq.delete(n);
    }
    const qs = hq.toString();
    history.replaceState(null, '', qs ? `#/?${qs}` : '#/');
    if (!any) {
      fill(searchResults, h('p', { class: 'muted', testid: 'search-empty' }, 'Give at least one of host, URL, method, verdict, file or command.'));
      return;
    }
    fill(searchResults, h('p', { class: 'muted' }, 'Searching…'));
    try {
      const data = await api(`api/search${query(q)}`);
      if (ctx.stale()) return;
      const hits = Array.isArray(data.hits) ? data.hits : [];
      const rows = hits.map((hit) => h('tr', { testid: 'search-hit', class: hit.verdict === 'deny' ? 'deny' : null, 'data-session': hit.session, 'data-seq': String(hit.seq) },
        h('td', { class: 'nowrap' }, fmtTime(hit.ts_us), h('span', { class: 'muted' }, ` ${fmtClock(hit.ts_us).slice(8)}`)),
        h('td', null, h('a', { class: 'mono', href: `#/s/${enc(hit.session)}` }, shortId(hit.session))),
        h('td', null, h('span', { class: `kind kind-${hit.kind}` }, hit.kind)),
        h('td', { class: 'mono' }, h('a', { href: `#/s/${enc(hit.session)}/e/${enc(hit.seq)}`, testid: 'search-hit-link' }, hit.summary || `event #${hit.seq}`))));
      const n = hits.length;
      fill(searchResults, 
        h('p', { class: 'muted', testid: 'search-count' }, `${n} event${n === 1 ? '' : 's'} found`,
          data.legacy_sessions ? ` (${data.legacy_sessions} older session${data.legacy_sessions === 1 ? '' : 's'} scanned without the index)` : ''),
        n ? h('div', { class: 'table-wrap' }, h('table', { class: 'grid hits', testid: 'search-table' },
          h('thead', null, h('tr', null, ['Time (UTC)', 'Session', 'Kind', 'Event'].map((l) => h('th', { scope: 'col' }, l)))),
          h('tbody', null, rows))) : null);
    } catch (err) {
      if (ctx.stale()) return;
      fill(searchResults, errorBox(err, 'the search'));
    }
  }

  await load();
  if (SEARCH.some((n) => params.get(n))) runSearch();
}
