// A session: header, process tree, and the timeline of everything, kept up
// to date while the session runs.

import {
  h, append, fill, api, enc, fmtOffset, fmtClock, fmtDuration, argvLine, basename, verdictBadge, errorBox, clear,
} from './util.js';
import { sessionHeader, sessionTabs, modeText } from './header.js';
import { followLive } from './live.js';

const ROW_LIMIT = 2000;

export async function renderSession(page, id, ctx) {
  const [s, evs, tree] = await Promise.all([
    api(`api/sessions/${enc(id)}`),
    api(`api/sessions/${enc(id)}/events`),
    api(`api/sessions/${enc(id)}/tree`).catch((err) => ({ error: err })),
  ]);
  if (ctx.stale()) return;

  const state = {
    events: Array.isArray(evs.events) ? evs.events : [],
    execs: tree && Array.isArray(tree.execs) ? tree.execs : [],
    kinds: new Set(),
    hiddenKinds: new Set((ctx.params.get('hide') || '').split(',').filter(Boolean)),
    exec: ctx.params.get('exec') || null,
    subtree: ctx.params.get('subtree') !== '0',
    deniedOnly: ctx.params.get('denied') === '1',
    text: (ctx.params.get('q') || '').trim().toLowerCase(),
    limit: ROW_LIMIT,
    lastSeq: 0,
    expanded: new Set(),
    collapsed: new Set(),
  };
  for (const e of state.events) state.lastSeq = Math.max(state.lastSeq, e.seq);

  let header = sessionHeader(s);
  const treeBox = h('div', { class: 'tree-box', testid: 'process-tree' });
  const chipBox = h('div', { class: 'chips', testid: 'kind-filters', role: 'group', 'aria-label': 'Event kinds' });
  const timelineStatus = h('span', { class: 'muted small', testid: 'timeline-status' });
  const execFilter = h('div', { class: 'exec-filter', testid: 'exec-filter' });
  const tbody = h('tbody', null);
  const table = h('table', { class: 'grid timeline', testid: 'timeline' },
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', class: 'num' }, '#'),
      h('th', { scope: 'col' }, 'Time'),
      h('th', { scope: 'col' }, 'Kind'),
      h('th', { scope: 'col' }, 'Process'),
      h('th', { scope: 'col' }, 'What happened'),
      h('th', { scope: 'col' }, 'Verdict'))),
    tbody);
  const more = h('div', { class: 'more' });
  const liveBox = h('span', { class: 'live-slot' });
  const v = s.verification || {};
  const badSeq = v.outcome === 'tampered' && typeof v.first_bad_seq === 'number' ? v.first_bad_seq : null;
  const tamperNote = v.outcome === 'tampered'
    ? h('p', { class: 'error', role: 'alert', testid: 'tamper-warning' },
      h('strong', null, 'This record was altered after it was written. '),
      badSeq !== null
        ? `Event #${badSeq} is the first that is not what was recorded; it and everything after it may be forged.`
        : 'Which events are genuine cannot be told.')
    : null;
  const textFilter = h('input', { type: 'search', class: 'text-filter', testid: 'timeline-text', placeholder: 'filter: text in the summary', value: ctx.params.get('q') || '', spellcheck: 'false', 'aria-label': 'Filter the timeline by text' });
  let textTimer = null;
  textFilter.addEventListener('input', () => {
    clearTimeout(textTimer);
    textTimer = setTimeout(() => { state.text = textFilter.value.trim().toLowerCase(); syncHash(); drawTimeline(); }, 150);
  });
  const deniedToggle = h('input', { type: 'checkbox', id: 'only-denied', testid: 'filter-only-denied', checked: state.deniedOnly });
  deniedToggle.addEventListener('change', () => { state.deniedOnly = deniedToggle.checked; syncHash(); drawTimeline(); });

  append(page, 
    header,
    sessionTabs(id, 'session'),
    h('div', { class: 'split' },
      h('section', { class: 'card tree-card' },
        h('div', { class: 'card-head' }, h('h2', null, 'Process tree'),
          h('span', { class: 'head-actions' },
            h('button', { type: 'button', class: 'btn btn-small', testid: 'tree-expand-all', onclick: () => { state.collapsed.clear(); for (const x of state.execs) state.expanded.add(x.exec_id); drawTree(); } }, 'Expand all'),
            h('button', { type: 'button', class: 'btn btn-small', testid: 'tree-collapse-all', onclick: () => { state.expanded.clear(); for (const x of state.execs) state.collapsed.add(x.exec_id); drawTree(); } }, 'Collapse all'))),
        treeBox),
      h('section', { class: 'card timeline-card' },
        h('div', { class: 'card-head' }, h('h2', null, 'Timeline'), liveBox, timelineStatus),
        tamperNote,
        chipBox,
        h('div', { class: 'timeline-tools' },
          textFilter,
          h('label', { class: 'check', for: 'only-denied' }, deniedToggle, ' only refusals'),
          execFilter),
        h('div', { class: 'table-wrap' }, table),
        more)));

  // ---- process tree ----

  const execById = () => new Map(state.execs.map((x) => [x.exec_id, x]));
  let byId = execById();

  function children() {
    const kids = new Map();
    const roots = [];
    for (const x of state.execs) {
      if (x.parent && byId.has(x.parent) && x.parent !== x.exec_id) {
        if (!kids.has(x.parent)) kids.set(x.parent, []);
        kids.get(x.parent).push(x);
      } else {
        roots.push(x);
      }
    }
    return { kids, roots };
  }

  function deniedByExec() {
    const m = new Map();
    for (const e of state.events) if (e.verdict === 'deny' && e.exec_id) m.set(e.exec_id, (m.get(e.exec_id) || 0) + 1);
    return m;
  }

  function isExpanded(x, depth) {
    if (state.collapsed.has(x.exec_id)) return false;
    if (state.expanded.has(x.exec_id)) return true;
    // The first two levels open; deeper ones on demand, unless small.
    return depth < 1 || state.execs.length <= 6;
  }

  function drawTree() {
    if (tree && tree.error) {
      fill(treeBox, errorBox(tree.error, 'the process tree'));
      return;
    }
    if (state.execs.length === 0) {
      fill(treeBox, h('p', { class: 'muted' }, s.capabilities_note || 'No process was recorded in this session.'));
      return;
    }
    const { kids, roots } = children();
    const denied = deniedByExec();
    const node = (x, depth) => {
      const sub = kids.get(x.exec_id) || [];
      const open = isExpanded(x, depth);
      const running = x.ended_us === null || x.ended_us === undefined;
      let status;
      if (x.signal !== null && x.signal !== undefined) status = h('span', { class: 'st st-bad', testid: 'tree-status' }, `signal ${x.signal}`);
      else if (x.exit_status !== null && x.exit_status !== undefined) status = h('span', { class: x.exit_status === 0 ? 'st st-ok' : 'st st-bad', testid: 'tree-status' }, `exit ${x.exit_status}`);
      else status = h('span', { class: 'st st-run', testid: 'tree-status' }, running ? 'running' : 'no exit recorded');
      const nDenied = denied.get(x.exec_id) || 0;
      const toggle = sub.length
        ? h('button', {
          type: 'button', class: 'toggle', testid: 'tree-toggle', 'aria-expanded': open ? 'true' : 'false',
          'aria-label': open ? 'Collapse' : 'Expand', title: `${sub.length} child process${sub.length === 1 ? '' : 'es'}`,
          onclick: () => {
            if (open) { state.collapsed.add(x.exec_id); state.expanded.delete(x.exec_id); } else { state.expanded.add(x.exec_id); state.collapsed.delete(x.exec_id); }
            drawTree();
          },
        }, open ? '▾' : '▸')
        : h('span', { class: 'toggle-spacer', 'aria-hidden': 'true' });
      const argv = Array.isArray(x.argv) && x.argv.length ? x.argv : [x.path || '?'];
      const label = h('button', {
        type: 'button', class: 'node-label', testid: 'tree-label', title: `${x.path || ''}\n${argvLine(argv)}`,
        onclick: () => { state.exec = state.exec === x.exec_id ? null : x.exec_id; syncHash(); drawTree(); drawTimeline(); },
      },
      h('span', { class: 'prog' }, basename(argv[0]) || basename(x.path)),
      argv.length > 1 ? h('span', { class: 'args' }, ` ${argvLine(argv.slice(1))}`) : null);
      return h('li', {
        class: ['tree-node', state.exec === x.exec_id ? 'selected' : '', nDenied ? 'has-denials' : ''],
        testid: 'tree-node', 'data-exec': x.exec_id, 'data-depth': String(depth), role: 'treeitem',
        'aria-expanded': sub.length ? (open ? 'true' : 'false') : null,
      },
      h('div', { class: 'node-row' }, toggle, label, status,
        nDenied ? h('span', { class: 'st st-bad', testid: 'tree-denials' }, `${nDenied} refused`) : null),
      h('div', { class: 'node-meta mono' },
        h('span', { testid: 'tree-cwd', title: 'working directory' }, x.cwd || '?'),
        h('span', { class: 'muted' }, ` · pid ${x.pid ?? '?'}`),
        h('span', { class: 'muted', testid: 'tree-duration' }, ` · ${running ? 'running' : fmtDuration(x.duration_ms)}`),
        x.path && basename(x.path) !== basename(argv[0]) ? h('span', { class: 'muted' }, ` · ${x.path}`) : null),
      sub.length && open ? h('ul', { class: 'tree-children', role: 'group' }, sub.map((c) => node(c, depth + 1))) : null);
    };
    fill(treeBox, h('ul', { class: 'tree', role: 'tree' }, roots.map((r) => node(r, 0))));
  }

  // ---- timeline ----

  /** The exec ids whose events show while a tree node is selected. */
  function selectedExecs() {
    if (!state.exec) return null;
    const set = new Set([state.exec]);
    if (state.subtree) {
      const { kids } = children();
      const stack = [state.exec];
      while (stack.length) {
        for (const c of kids.get(stack.pop()) || []) {
          if (!set.has(c.exec_id)) { set.add(c.exec_id); stack.push(c.exec_id); }
        }
      }
    }
    return set;
  }

  function visible(e, execs) {
    if (state.hiddenKinds.has(e.kind)) return false;
    if (state.deniedOnly && e.verdict !== 'deny') return false;
    if (state.text && !(e.summary || '').toLowerCase().includes(state.text)) return false;
    if (execs && !(e.exec_id && execs.has(e.exec_id))) return false;
    return true;
  }

  function drawChips() {
    const counts = new Map();
    for (const e of state.events) counts.set(e.kind, (counts.get(e.kind) || 0) + 1);
    const kinds = [...counts.keys()].sort(kindOrder);
    fill(chipBox, ...kinds.map((k) => {
      const box = h('input', { type: 'checkbox', checked: !state.hiddenKinds.has(k), testid: `kind-${k}`, 'data-kind': k });
      box.addEventListener('change', () => {
        if (box.checked) state.hiddenKinds.delete(k); else state.hiddenKinds.add(k);
        syncHash();
        drawChips();
        drawTimeline();
      });
      return h('label', { class: ['chip', `kind-${k}`, state.hiddenKinds.has(k) ? 'off' : 'on'], testid: 'kind-chip' }, box, ` ${k} `, h('span', { class: 'chip-count' }, String(counts.get(k))));
    }),
    kinds.length > 1 ? h('button', { type: 'button', class: 'btn btn-small btn-link', testid: 'kinds-all', onclick: () => { state.hiddenKinds.clear(); syncHash(); drawChips(); drawTimeline(); } }, 'all') : null);
  }

  function execName(execId) {
    const x = execId && byId.get(execId);
    if (!x) return execId ? execId.slice(0, 8) : '';
    return basename((x.argv && x.argv[0]) || x.path);
  }

  function row(e) {
    const deny = e.verdict === 'deny';
    return h('tr', {
      class: ['ev', `ev-${e.kind}`, deny ? 'deny' : '', e.verdict === 'report' ? 'report' : '', badSeq !== null && e.seq >= badSeq ? 'suspect' : ''],
      title: badSeq !== null && e.seq >= badSeq ? (e.seq === badSeq ? 'the first event that is not what was recorded' : 'after the first altered event: not proven') : null,
      testid: 'timeline-row', 'data-seq': String(e.seq), 'data-kind': e.kind,
      'data-verdict': e.verdict || '', 'data-key': e.key || '', 'data-exec': e.exec_id || '',
      onclick: (ev) => { if (!(ev.target instanceof HTMLAnchorElement || ev.target instanceof HTMLButtonElement)) location.hash = `#/s/${enc(id)}/e/${enc(e.seq)}`; },
    },
    h('td', { class: 'num muted' }, String(e.seq)),
    h('td', { class: 'nowrap mono small', title: `${fmtClock(e.ts_us)} UTC` }, fmtOffset(e.ts_us, s.started_us)),
    h('td', null, h('span', { class: `kind kind-${e.kind}` }, e.kind)),
    h('td', { class: 'mono small proc' }, e.exec_id
      ? h('button', { type: 'button', class: 'linkish proc-name', 'data-exec': e.exec_id, title: 'show this process in the tree', onclick: () => { state.exec = e.exec_id; state.expanded.add(e.exec_id); revealExec(e.exec_id); syncHash(); drawTree(); drawTimeline(); } }, execName(e.exec_id))
      : ''),
    h('td', { class: 'mono summary' },
      h('a', { href: `#/s/${enc(id)}/e/${enc(e.seq)}`, testid: 'timeline-link' }, e.summary || `${e.kind} event`)),
    h('td', null, verdictBadge(e.verdict)));
  }

  function emptyRow() {
    return h('tr', { class: 'empty-row' }, h('td', { colspan: '6', class: 'empty' }, state.events.length ? 'No event matches the filters.' : 'Nothing recorded yet.'));
  }

  function drawStatus(shownCount) {
    const denials = state.events.filter((e) => e.verdict === 'deny').length;
    timelineStatus.textContent = `${shownCount} of ${state.events.length} events${denials ? ` · ${denials} refused` : ''}`;
  }

  function drawTimeline() {
    const execs = selectedExecs();
    const shown = state.events.filter((e) => visible(e, execs));
    const rows = shown.slice(0, state.limit).map(row);
    fill(tbody, ...(rows.length ? rows : [emptyRow()]));
    drawStatus(shown.length);
    clear(more);
    if (shown.length > state.limit) {
      append(more, h('button', { type: 'button', class: 'btn', onclick: () => { state.limit += ROW_LIMIT; drawTimeline(); } }, `Show ${Math.min(ROW_LIMIT, shown.length - state.limit)} more`));
    }
    clear(execFilter);
    if (state.exec) {
      const x = byId.get(state.exec);
      const sub = h('input', { type: 'checkbox', id: 'exec-subtree', checked: state.subtree });
      sub.addEventListener('change', () => { state.subtree = sub.checked; syncHash(); drawTimeline(); });
      append(execFilter, 
        h('span', { class: 'filter-pill', testid: 'exec-filter-pill' }, 'process: ', h('span', { class: 'mono' }, x ? argvLine(x.argv).slice(0, 60) : state.exec),
          h('button', { type: 'button', class: 'pill-x', testid: 'exec-filter-clear', 'aria-label': 'Show every process', onclick: () => { state.exec = null; syncHash(); drawTree(); drawTimeline(); } }, '×')),
        h('label', { class: 'check', for: 'exec-subtree' }, sub, ' with its children'));
    }
  }

  function revealExec(execId) {
    let x = byId.get(execId);
    while (x && x.parent && byId.has(x.parent)) {
      state.expanded.add(x.parent);
      state.collapsed.delete(x.parent);
      x = byId.get(x.parent);
    }
  }

  function syncHash() {
    const q = new URLSearchParams();
    if (state.exec) q.set('exec', state.exec);
    if (state.exec && !state.subtree) q.set('subtree', '0');
    if (state.hiddenKinds.size) q.set('hide', [...state.hiddenKinds].join(','));
    if (state.deniedOnly) q.set('denied', '1');
    if (state.text) q.set('q', state.text);
    const qs = q.toString();
    history.replaceState(null, '', `#/s/${enc(id)}${qs ? `?${qs}` : ''}`);
  }

  if (state.exec) revealExec(state.exec);
  drawTree();
  drawChips();
  drawTimeline();

  // ---- live ----

  if ((s.end === null || s.end === undefined) && !evs.ended) {
    // The running session's duration, counted by the page until it ends.
    const ticker = setInterval(() => {
      const el = header.querySelector('[data-testid=session-duration]');
      if (el && (s.end === null || s.end === undefined)) el.textContent = `${fmtDuration(Date.now() - s.started_us / 1000)} so far`;
    }, 1000);
    ctx.onCleanup(() => clearInterval(ticker));
    let treeTimer = null;
    const refreshTree = () => {
      if (treeTimer) return;
      treeTimer = setTimeout(async () => {
        treeTimer = null;
        try {
          const t = await api(`api/sessions/${enc(id)}/tree`);
          if (ctx.stale()) return;
          state.execs = Array.isArray(t.execs) ? t.execs : state.execs;
          byId = execById();
          drawTree();
          // Rows that arrived before their exec was in the tree named it by id.
          for (const b of tbody.querySelectorAll('button.proc-name')) b.textContent = execName(b.dataset.exec);
        } catch (_) { /* the next exec or exit retries */ }
      }, 150);
    };
    // A live session's step count, as its steps start: the count the page
    // loaded with is that of the moment it loaded.
    const countSteps = () => {
      if (s.steps === null || s.steps === undefined) return;
      const seen = state.events.filter((x) => x.kind === 'step_start').length;
      s.steps = Math.max(s.steps, seen);
      const el = header.querySelector('[data-testid=session-mode]');
      if (el) el.textContent = modeText(s);
    };
    countSteps();
    const stop = followLive(id, () => state.lastSeq, {
      indicator: liveBox,
      onEvent(e) {
        if (e.seq <= state.lastSeq) return;
        state.lastSeq = e.seq;
        // A later record of the same exchange replaces the earlier one and
        // takes its place at the end, as the collapsed list has it.
        const i = e.key ? state.events.findIndex((x) => x.key === e.key) : -1;
        if (i >= 0) {
          const old = state.events[i];
          state.events.splice(i, 1);
          const tr = tbody.querySelector(`tr[data-seq="${CSS.escape(String(old.seq))}"]`);
          if (tr) tr.remove();
        }
        state.events.push(e);
        drawChips();
        const execs = selectedExecs();
        const shownCount = state.events.filter((x) => visible(x, execs)).length;
        if (visible(e, execs) && shownCount <= state.limit) {
          const placeholder = tbody.querySelector('tr.empty-row');
          if (placeholder) placeholder.remove();
          const tr = row(e);
          tr.classList.add('fresh');
          if (e.verdict === 'deny') tr.classList.add('fresh-deny');
          tr.dataset.shownAt = String(Date.now());
          tbody.appendChild(tr);
          setTimeout(() => tr.classList.remove('fresh', 'fresh-deny'), 4000);
        } else if (!tbody.querySelector('tr')) {
          tbody.appendChild(emptyRow());
        }
        drawStatus(shownCount);
        if (e.kind === 'step_start') countSteps();
        if (e.kind === 'exec' || e.kind === 'exit') refreshTree();
        else if (e.verdict === 'deny') drawTree();
      },
      async onEnd() {
        try {
          const [s2, t] = await Promise.all([api(`api/sessions/${enc(id)}`), api(`api/sessions/${enc(id)}/tree`)]);
          if (ctx.stale()) return;
          Object.assign(s, s2);
          const fresh = sessionHeader(s2);
          header.replaceWith(fresh);
          header = fresh;
          state.execs = Array.isArray(t.execs) ? t.execs : state.execs;
          byId = execById();
          drawTree();
        } catch (_) { /* the page still shows what it had */ }
      },
    });
    ctx.onCleanup(() => { stop(); if (treeTimer) clearTimeout(treeTimer); });
  }
}

const KIND_ORDER = ['exec', 'exit', 'http', 'tcp', 'dns', 'file', 'output', 'approval_requested', 'approval_decided', 'step_start', 'step_end', 'note', 'untraced', 'resize'];
function kindOrder(a, b) {
  const ia = KIND_ORDER.indexOf(a);
  const ib = KIND_ORDER.indexOf(b);
  return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
}
