// A session's MCP tool calls: one row per message (its latest record), with
// the tool, its arguments, the verdict and rule, why a refused one was
// refused, and the answer. A tools/list answer lists the tools offered;
// a tool whose description or schema changed since the session's previous
// list is flagged loudly (how a poisoned tool shows itself), with its new
// description. Everything here came from the sandbox or the MCP server,
// and reaches the page as text only (util.js `h`).

import {
  h, append, api, enc, fmtClock, fmtBytes, verdictBadge, valueText,
} from './util.js';
import { sessionHeader, sessionTabs } from './header.js';

export async function renderTools(page, id, ctx) {
  const [s, data] = await Promise.all([
    api(`api/sessions/${enc(id)}`),
    api(`api/sessions/${enc(id)}/tools`),
  ]);
  if (ctx.stale()) return;
  const calls = Array.isArray(data.calls) ? data.calls : [];
  const changedLists = calls.filter((c) => c.changed && c.changed.length);
  append(page,
    sessionHeader(s),
    sessionTabs(id, 'tools'),
    changedLists.length
      ? h('div', { class: 'error tool-alert', role: 'alert', testid: 'tools-changed-alert' },
        h('strong', null, 'Tool definitions changed during this session: '),
        changedLists.flatMap((c) => c.changed).join(', '),
        '. A changed description or input schema is how a poisoned tool shows itself; read the new one below.')
      : null,
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h2', null, 'MCP tool calls'), h('span', { class: 'muted small', testid: 'tools-count' }, `${calls.length}`)),
      calls.length === 0
        ? h('p', { class: 'muted', testid: 'tools-empty' }, 'This session sent no message to an MCP server a policy names with mcp.')
        : h('div', { class: 'table-wrap' }, table(id, calls))));
}

function table(id, calls) {
  return h('table', { class: 'grid timeline tools', testid: 'tools-table' },
    h('thead', null, h('tr', null,
      ['Time', 'Exec', 'Server', 'Call', 'Arguments', 'Verdict', 'Rule', 'Answer'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', null, calls.map((c) => row(id, c))));
}

function row(id, c) {
  const changed = c.changed && c.changed.length > 0;
  return h('tr', {
    class: [c.decision === 'deny' ? 'deny' : '', changed ? 'tool-changed-row' : ''],
    testid: 'tool-call', 'data-tool': c.tool || '', 'data-method': c.method, 'data-verdict': c.decision, 'data-seq': String(c.seq),
  },
  h('td', { class: 'mono small' }, h('a', { href: `#/s/${enc(id)}/e/${c.seq}` }, fmtClock(c.ts_us))),
  h('td', { class: 'mono small' }, c.exec_id || '—'),
  h('td', { class: 'mono small' }, c.server),
  h('td', { class: 'mono', testid: 'tool-name' },
    c.tool ? h('strong', null, c.tool) : null,
    c.tool ? h('span', { class: 'muted small' }, ` ${c.method}`) : c.method,
    c.rpc_id === null || c.rpc_id === undefined ? h('span', { class: 'muted small' }, ' (notification)') : null,
    c.channel && c.channel !== 'post' ? h('span', { class: 'muted small' }, ` (in a ${c.channel})`) : null),
  h('td', { class: 'mono small' }, arguments_(c)),
  h('td', { testid: 'tool-verdict' }, verdictBadge(c.decision),
    c.approval ? h('span', { class: 'muted small' }, ` approval ${c.approval}`) : null),
  h('td', { class: 'mono small', testid: 'tool-rule' }, c.rule || '—',
    c.reason ? h('div', { class: 'small', testid: 'tool-reason' }, c.reason) : null),
  h('td', { class: 'small', testid: 'tool-answer' }, c.is_tool_list ? toolList(c) : answer(c)));
}

function arguments_(c) {
  if (c.arguments_truncated) return `not kept (${fmtBytes(c.arguments_bytes || 0)})`;
  if (c.arguments === null || c.arguments === undefined) return '—';
  return h('pre', { class: 'code tool-args', testid: 'tool-arguments' }, valueText(c.arguments));
}

function answer(c) {
  const r = c.result;
  if (!r) return h('span', { class: 'muted' }, c.decision === 'deny' ? 'refused: not forwarded' : 'no answer on record');
  return h('span', null,
    h('span', { class: r.is_error ? 'verdict verdict-deny' : 'muted' }, r.is_error ? 'error' : 'ok'),
    ` ${fmtBytes(r.bytes)} `,
    h('code', { class: 'mono' }, r.first_bytes));
}

function toolList(c) {
  const offered = c.offered || [];
  return h('div', { testid: 'tool-list' },
    h('div', null, `${offered.length} tools offered`,
      c.hidden && c.hidden.length ? `, hidden from the agent: ${c.hidden.join(', ')}` : ', none hidden'),
    h('ul', { class: 'tool-offered' }, offered.map((t) => h('li', {
      class: t.changed ? 'tool-changed' : (t.hidden ? 'muted' : ''),
      testid: t.changed ? 'tool-changed' : 'tool-offered', 'data-name': t.name,
    },
    t.changed ? h('span', { class: 'verdict verdict-deny' }, 'CHANGED') : null,
    t.changed ? ' ' : null,
    h('span', { class: 'mono' }, t.name),
    t.hidden ? h('span', { class: 'muted' }, ' (hidden)') : null,
    t.description ? h('div', { class: t.changed ? 'tool-description' : 'muted small', testid: t.changed ? 'tool-changed-description' : null }, t.description) : null))));
}
