// One event. An HTTP exchange gets the request page (decision, headers,
// bodies, timings, the process that sent it, the rule to add for a refusal);
// any other record is shown as a key/value table.

import {
  h, append, api, enc, fmtTime, fmtClock, fmtDuration, fmtBytes, argvLine, verdictBadge, kvTable, valueText, mono, shortId,
} from './util.js';

export async function renderEvent(page, id, seqText, ctx) {
  const seq = Number.parseInt(seqText, 10);
  const d = await api(`api/sessions/${enc(id)}/events/${enc(seqText)}`);
  if (ctx.stale()) return;
  const e = d.event || {};
  const kind = d.kind || e.kind;

  const nav = h('div', { class: 'event-nav' },
    h('a', { class: 'btn btn-small', href: `#/s/${enc(id)}`, testid: 'back-to-session' }, '← timeline'),
    Number.isFinite(seq) && seq > 1 ? h('a', { class: 'btn btn-small', href: `#/s/${enc(id)}/e/${seq - 1}`, testid: 'prev-event' }, `#${seq - 1}`) : null,
    Number.isFinite(seq) ? h('a', { class: 'btn btn-small', href: `#/s/${enc(id)}/e/${seq + 1}`, testid: 'next-event' }, `#${seq + 1}`) : null,
    h('span', { class: 'muted small' }, `session ${shortId(id)} · event #${d.seq} · ${fmtTime(d.ts_us)} UTC (${fmtClock(d.ts_us)})`));

  if (kind === 'http') {
    append(page, nav, ...httpPage(id, d, e));
  } else {
    append(page, nav, ...genericPage(id, d, e, kind));
  }
}

function execCard(id, exec) {
  if (!exec) {
    return h('section', { class: 'card', testid: 'event-exec' }, h('h2', null, 'Process'),
      h('p', { class: 'muted' }, 'No process is attributed to this event (proxy and sidecar sessions cannot see processes).'));
  }
  return h('section', { class: 'card', testid: 'event-exec' },
    h('div', { class: 'card-head' }, h('h2', null, 'Process'),
      exec.exec_id ? h('a', { class: 'btn btn-small', href: `#/s/${enc(id)}?exec=${enc(exec.exec_id)}`, testid: 'exec-link' }, 'show in the process tree') : null),
    kvTable([
      ['argv', h('code', { class: 'mono wrap', testid: 'exec-argv' }, argvLine(exec.argv))],
      ['path', mono(exec.path || '—')],
      ['cwd', mono(exec.cwd || '—')],
      ['exec id', mono(exec.exec_id || '—', { class: 'mono muted' })],
    ]));
}

function headersTable(headers, testid) {
  if (!Array.isArray(headers) || headers.length === 0) {
    return h('p', { class: 'muted', testid }, 'No headers recorded.');
  }
  return h('table', { class: 'grid headers', testid },
    h('tbody', null, headers.map((pair) => {
      const [name, value] = Array.isArray(pair) ? pair : [pair && pair.name, pair && pair.value];
      const secret = typeof value === 'string' && /\[secret:[^\]]+\]/.test(value);
      return h('tr', null, h('th', { scope: 'row', class: 'mono' }, String(name)),
        h('td', { class: ['mono', 'wrap', secret ? 'secret' : ''], title: secret ? 'an injected credential: the record keeps only its name' : null }, String(value ?? '')));
    })));
}

/** A body: pretty JSON, text, or a hex dump, with its size and a clear mark
 * when the record kept only its start. */
export function bodyView(body, testid, label) {
  const b = body || { encoding: 'none' };
  const head = h('div', { class: 'body-head' }, h('h3', null, label));
  if (!b.encoding || b.encoding === 'none' || (b.text === null || b.text === undefined) && !b.bytes) {
    return h('div', { class: 'body', testid }, head, h('p', { class: 'muted', 'data-encoding': 'none' }, 'No body.'));
  }
  const text = b.text ?? '';
  // JSON comes laid out by the server token for token: parsing it here
  // would keep one of two keys sent twice and round long numbers.
  append(head, 
    h('span', { class: 'muted small' }, `${b.encoding}${b.bytes !== undefined && b.bytes !== null ? ` · ${fmtBytes(b.bytes)}` : ''}`),
    b.truncated ? h('span', { class: 'badge badge-warn', testid: `${testid}-truncated` }, 'truncated: the record kept only the start of this body') : null);
  return h('div', { class: 'body', testid, 'data-encoding': b.encoding },
    head,
    h('pre', { class: ['code', `body-${b.encoding}`] }, text),
    b.truncated ? h('p', { class: 'truncated-note' }, '… (truncated)') : null);
}

function httpPage(id, d, e) {
  const deny = e.decision === 'deny';
  const bodies = d.bodies || {};
  const started = e.started_us ?? d.ts_us;

  const title = h('section', { class: ['card', 'request-head', deny ? 'is-deny' : ''], testid: 'request' },
    h('div', { class: 'request-line' },
      h('span', { class: 'method mono', testid: 'request-method' }, e.method || '?'),
      h('span', { class: 'url mono', testid: 'request-url' }, e.url || ''),
      h('span', { testid: 'request-verdict', 'data-verdict': e.decision || '' }, verdictBadge(e.decision) || h('span', { class: 'muted' }, 'no decision'))),
    kvTable([
      ['Decided by', h('span', { class: 'mono', testid: 'request-rule' }, e.rule || (deny ? 'the policy\'s default (deny)' : '—'))],
      e.reason ? ['Reason', h('span', { testid: 'request-reason', class: deny ? 'deny-text' : null }, e.reason)] : null,
      ['Status', h('span', { class: 'mono', testid: 'request-status' }, e.status === null || e.status === undefined ? (deny ? 'refused by Airlock (403)' : 'no response recorded') : String(e.status))],
      ['Protocol', mono(e.http_version || '—')],
      ['Started', h('span', { testid: 'request-started' }, `${fmtTime(started)} UTC (${fmtClock(started)})`)],
      deny && e.ms_total == null ? null : ['Timings', h('span', { testid: 'request-timings' },
        `headers after ${fmtDuration(e.ms_to_headers)} · complete after ${fmtDuration(e.ms_total)}`)],
      ['Bytes', h('span', { testid: 'request-bytes' }, `${fmtBytes(e.bytes_up ?? 0)} up · ${fmtBytes(e.bytes_down ?? 0)} down`)],
      e.exchange !== null && e.exchange !== undefined ? ['Exchange', mono(`#${e.exchange}`, { class: 'mono muted' })] : null,
    ]));

  let fix = null;
  if (d.rule_to_add) {
    fix = h('section', { class: 'card fix', testid: 'rule-to-add-card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Rule to add'),
        copyButton(d.rule_to_add)),
      h('p', null, 'To allow this request, add this rule to the policy:'),
      h('pre', { class: 'code toml', testid: 'rule-to-add' }, d.rule_to_add));
  } else if (d.advice) {
    fix = h('section', { class: 'card fix', testid: 'advice-card' },
      h('h2', null, 'What to change'),
      h('p', { testid: 'advice' }, d.advice));
  }

  const ws = e.websocket ? h('section', { class: 'card', testid: 'websocket' }, h('h2', null, 'WebSocket'),
    h('pre', { class: 'code' }, JSON.stringify(e.websocket, null, 2))) : null;

  return [
    title,
    fix,
    h('div', { class: 'split-even' },
      h('section', { class: 'card' }, h('h2', null, 'Request'),
        h('h3', null, 'Headers'), headersTable(e.request_headers, 'request-headers'),
        bodyView(bodies.request, 'request-body', 'Body')),
      deny && !(e.response_headers && e.response_headers.length)
        ? h('section', { class: 'card' }, h('h2', null, 'Response'),
          h('p', { class: 'muted', testid: 'refused-note' }, 'None: Airlock refused the request before it left the sandbox. The client got Airlock\'s 403, which names the rule to add.'))
        : h('section', { class: 'card' }, h('h2', null, 'Response'),
          h('h3', null, 'Headers'), headersTable(e.response_headers, 'response-headers'),
          bodyView(bodies.response, 'response-body', 'Body'))),
    ws,
    execCard(id, d.exec),
  ];
}

function copyButton(text) {
  const btn = h('button', { type: 'button', class: 'btn btn-small', testid: 'copy-rule' }, 'Copy');
  btn.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      btn.textContent = 'Copied';
    } catch (_) {
      btn.textContent = 'Select and copy';
    }
    setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
  });
  return btn;
}

function genericPage(id, d, e, kind) {
  const deny = d.event && (e.decision === 'deny');
  const rows = Object.entries(e)
    .filter(([k]) => k !== 'kind')
    .map(([k, v]) => {
      let node;
      if (k === 'argv' && Array.isArray(v)) node = h('code', { class: 'mono wrap' }, argvLine(v));
      else if (k === 'path' && kind === 'file') {
        node = h('span', null, mono(String(v)), ' ',
          h('a', { href: `#/s/${enc(id)}/files?path=${enc(String(v))}&seq=${enc(d.seq)}`, testid: 'file-link' }, 'versions and diff'));
      } else if (v !== null && typeof v === 'object') node = h('pre', { class: 'code' }, valueText(v));
      else node = h('span', { class: ['mono', 'wrap', k === 'decision' && v === 'deny' ? 'deny-text' : ''] }, valueText(v));
      return [k, node, { 'data-key': k }];
    });

  let fix = null;
  if (d.rule_to_add) {
    fix = h('section', { class: 'card fix', testid: 'rule-to-add-card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Rule to add'), copyButton(d.rule_to_add)),
      h('pre', { class: 'code toml', testid: 'rule-to-add' }, d.rule_to_add));
  } else if (d.advice) {
    fix = h('section', { class: 'card fix', testid: 'advice-card' }, h('h2', null, 'What to change'), h('p', { testid: 'advice' }, d.advice));
  }

  const output = kind === 'output' && typeof e.data === 'string' ? decodeOutput(e.data) : null;

  return [
    output !== null ? h('section', { class: 'card', testid: 'output-text' },
      h('div', { class: 'card-head' }, h('h2', null, `Output (${e.stream || 'stdout'})`),
        h('a', { class: 'btn btn-small', href: `#/s/${enc(id)}/terminal` }, 'play in the terminal')),
      h('pre', { class: 'code' }, output)) : null,
    h('section', { class: ['card', deny ? 'is-deny' : ''], testid: 'event-record', 'data-kind': kind },
      h('div', { class: 'card-head' },
        h('h1', null, h('span', { class: `kind kind-${kind}` }, kind), ' ', h('span', { class: 'mono', testid: 'event-summary' }, d.summary || '')),
        e.decision ? verdictBadge(e.decision) : null),
      kvTable(rows, { class: 'kv record', testid: 'event-fields' })),
    fix,
    execCard(id, d.exec),
  ];
}

/** An output record's bytes (base64) as text, escape sequences made
 * visible (␛) rather than interpreted. */
function decodeOutput(b64) {
  try {
    const bin = atob(b64);
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    return new TextDecoder('utf-8', { fatal: false }).decode(bytes).replace(/\u001b/g, '␛');
  } catch (_) {
    return null;
  }
}
