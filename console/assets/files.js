// Files the session wrote: every version, its content, the diff from the
// version before it (for a file that existed before the session, its first
// version is what it held then: op "original"), downloads. Over-the-cap
// versions were kept as a hash only, and say so. An extended attribute set
// or removed is a version of its own: the attribute's name and value, and
// for an ACL the permissions it left (mode and entries); it never enters a
// content diff.

import {
  h, append, fill, api, enc, fmtTime, fmtClock, fmtBytes, shortHash, errorBox, clear,
} from './util.js';
import { sessionHeader, sessionTabs } from './header.js';

const CONTENT_OPS = new Set(['create', 'modify', 'truncate', 'image', 'original']);
// A version with content: written here, or brought here by a rename (an
// editor's write-then-rename).
const hasContentOp = (v) => !v.xattr && (CONTENT_OPS.has(v.op) || Boolean(v.renamed_from));

export async function renderFiles(page, id, ctx) {
  const [s, data] = await Promise.all([
    api(`api/sessions/${enc(id)}`),
    api(`api/sessions/${enc(id)}/files`),
  ]);
  if (ctx.stale()) return;
  const files = Array.isArray(data.files) ? data.files : [];
  const state = {
    path: ctx.params.get('path'),
    seq: ctx.params.get('seq') ? Number(ctx.params.get('seq')) : null,
    show: ctx.params.get('show') || 'diff',
  };
  if (!state.path || !files.some((f) => f.path === state.path)) state.path = files.length ? files[0].path : null;

  const list = h('ul', { class: 'file-list', testid: 'files-list' });
  const detail = h('div', { class: 'file-detail', testid: 'file-detail' });
  append(page, 
    sessionHeader(s),
    sessionTabs(id, 'files'),
    files.length === 0
      ? h('section', { class: 'card' }, h('p', { class: 'muted', testid: 'files-empty' }, s.capabilities_note || 'This session wrote no file.'))
      : h('div', { class: 'split files-split' },
        h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Files written'), h('span', { class: 'muted small' }, `${files.length}`)), list),
        h('section', { class: 'card' }, detail)));

  function sync() {
    const q = new URLSearchParams();
    if (state.path) q.set('path', state.path);
    if (state.seq !== null) q.set('seq', String(state.seq));
    if (state.show !== 'diff') q.set('show', state.show);
    history.replaceState(null, '', `#/s/${enc(id)}/files?${q}`);
  }

  function drawList() {
    fill(list, ...files.map((f) => {
      const last = f.versions[f.versions.length - 1] || {};
      const deleted = last.op === 'delete';
      return h('li', { class: ['file-item', f.path === state.path ? 'selected' : '', deleted ? 'deleted' : ''], testid: 'file-item', 'data-path': f.path },
        h('button', { type: 'button', class: 'file-button', onclick: () => { state.path = f.path; state.seq = null; state.show = 'diff'; sync(); drawList(); drawDetail(); } },
          h('span', { class: 'mono file-path' }, f.path),
          h('span', { class: 'muted small' }, `${f.versions.length} version${f.versions.length === 1 ? '' : 's'}${deleted ? ' · deleted' : ''}`)));
    }));
  }

  function drawDetail() {
    const f = files.find((x) => x.path === state.path);
    if (!f) { clear(detail); return; }
    const versions = f.versions;
    let current = versions.findIndex((v) => v.seq === state.seq);
    if (current < 0) {
      // The newest version with file content, else the newest.
      current = versions.length - 1;
      for (let i = versions.length - 1; i >= 0; i--) if (versions[i].content && hasContentOp(versions[i]) && !versions[i].renamed_from) { current = i; break; }
    }
    const viewer = h('div', { class: 'viewer', testid: 'file-viewer' });
    const rows = versions.map((v, i) => {
      const hashOnly = !v.content && hasContentOp(v);
      return h('tr', { class: ['file-version', i === current ? 'selected' : ''], testid: 'file-version', 'data-seq': String(v.seq), 'data-op': v.op },
        h('td', { class: 'num' }, h('a', { href: `#/s/${enc(id)}/e/${enc(v.seq)}`, title: 'the file event' }, `#${v.seq}`)),
        h('td', { class: 'nowrap mono small', title: `${fmtTime(v.ts_us)} UTC` }, fmtClock(v.ts_us)),
        h('td', null, h('span', { class: `op op-${v.op}` }, v.op), v.rename_to ? h('span', { class: 'mono small' }, ` → ${v.rename_to}`) : null,
          v.renamed_from ? h('span', { class: 'mono small' }, ` ← ${v.renamed_from}`) : null, attributeLine(v)),
        h('td', { class: 'num' }, v.size === null || v.size === undefined ? '—' : fmtBytes(v.size)),
        h('td', { class: 'mono small', title: v.sha256 || '' }, v.sha256 ? shortHash(v.sha256) : '—'),
        h('td', null, h('div', { class: 'actions' },
          hashOnly
            ? h('span', { class: 'badge badge-warn', testid: 'hash-only' }, v.over_cap ? 'hash only (over the cap)' : v.over_budget ? 'hash only (over the budget)' : 'hash only (content not kept)')
            : v.content && v.xattr
              ? [
                h('button', { type: 'button', class: ['btn', 'btn-small', i === current ? 'active' : ''], testid: 'view-value', onclick: () => { state.seq = v.seq; state.show = 'content'; sync(); drawDetail(); } }, 'Value'),
                h('a', { class: 'btn btn-small', href: `api/sessions/${enc(id)}/content/${enc(v.content)}`, download: '', testid: 'download-content' }, 'Download'),
              ]
            : v.content
              ? [
                h('button', { type: 'button', class: ['btn', 'btn-small', i === current && state.show === 'content' ? 'active' : ''], testid: 'view-content', onclick: () => { state.seq = v.seq; state.show = 'content'; sync(); drawDetail(); } }, 'Content'),
                h('button', { type: 'button', class: ['btn', 'btn-small', i === current && state.show === 'diff' ? 'active' : ''], testid: 'view-diff', onclick: () => { state.seq = v.seq; state.show = 'diff'; sync(); drawDetail(); } }, 'Diff'),
                h('a', { class: 'btn btn-small', href: `api/sessions/${enc(id)}/content/${enc(v.content)}`, download: '', testid: 'download-content' }, 'Download'),
              ]
              : h('span', { class: 'muted small' }, v.op === 'delete' ? 'deleted' : ''))));
    });
    fill(detail, 
      h('div', { class: 'card-head' }, h('h2', { class: 'mono', testid: 'file-path' }, f.path)),
      h('div', { class: 'table-wrap' }, h('table', { class: 'grid versions', testid: 'file-versions' },
        h('thead', null, h('tr', null, ['Event', 'Time (UTC)', 'Operation', 'Size', 'SHA-256', ''].map((l) => h('th', { scope: 'col' }, l)))),
        h('tbody', null, rows))),
      viewer);
    showVersion(versions, current, viewer);
  }

  async function showVersion(versions, i, viewer) {
    const v = versions[i];
    if (!v) return;
    if (v.xattr) {
      showAttribute(v, viewer);
      return;
    }
    if (!v.content) {
      fill(viewer, h('p', { class: 'note-box', testid: hasContentOp(v) ? 'hash-only-note' : 'no-content-note' },
        hasContentOp(v)
          ? (v.over_cap
            ? `Hash only (over the cap): this version was larger than the session's --audit-max-file, so the record kept its SHA-256 (${v.sha256 || 'unknown'}) and not its content.`
            : v.over_budget
            ? `Hash only (over the budget): the session's record budget (--audit-max-session) was spent before this version, so the record kept its SHA-256 (${v.sha256 || 'unknown'}) and not its content.`
            : `Hash only: the record kept this version's SHA-256 (${v.sha256 || 'unknown'}) and not its content.`)
          : `A ${v.op} leaves no new content to show.`));
      return;
    }
    fill(viewer, h('p', { class: 'muted' }, 'Loading…'));
    try {
      if (state.show === 'content') {
        const c = await api(`api/sessions/${enc(id)}/content/${enc(v.content)}?view=1`);
        if (ctx.stale()) return;
        fill(viewer, 
          h('div', { class: 'body-head' }, h('h3', null, `Content at #${v.seq}`),
            h('span', { class: 'muted small' }, `${c.encoding} · ${fmtBytes(c.bytes)}`)),
          h('pre', { class: ['code', 'file-content', `body-${c.encoding}`], testid: 'file-content', 'data-encoding': c.encoding }, c.text ?? ''));
        return;
      }
      // The version before: the nearest earlier one that has content.
      let prev = null;
      for (let j = i - 1; j >= 0; j--) {
        if (hasContentOp(versions[j]) || versions[j].op === 'delete') { prev = versions[j]; break; }
      }
      let from = 'empty';
      let note;
      let fromLabel;
      if (prev && prev.content && prev.op === 'original') {
        from = prev.content;
        fromLabel = 'before the session';
        note = `Changes from what the file held before the session (#${prev.seq}) to #${v.seq}.`;
      } else if (prev && prev.content) {
        from = prev.content;
        fromLabel = `#${prev.seq}`;
        note = `Changes from #${prev.seq} to #${v.seq}.`;
      } else if (v.op === 'original') {
        fromLabel = 'empty';
        note = 'What the file held before the session: its first change comes next.';
      } else if (prev && prev.op === 'delete') {
        fromLabel = 'empty';
        note = `The file was deleted at #${prev.seq} and written again: the whole content is new.`;
      } else if (prev) {
        fromLabel = 'empty';
        note = `The version before (#${prev.seq}) was kept as a hash only, so this shows the whole of #${v.seq}.`;
      } else if (v.op === 'create') {
        fromLabel = 'empty';
        note = 'Created in this session: every line is new.';
      } else {
        fromLabel = 'empty';
        note = 'What this file held before the session is not recorded: this shows the whole first recorded version.';
      }
      const diff = await api(`api/sessions/${enc(id)}/diff?from=${enc(from)}&to=${enc(v.content)}`);
      if (ctx.stale()) return;
      fill(viewer, 
        h('div', { class: 'body-head' }, h('h3', null, `Diff ${fromLabel} → #${v.seq}`),
          h('a', { class: 'btn btn-small', href: `api/sessions/${enc(id)}/content/${enc(v.content)}`, download: '', testid: 'download-version' }, 'Download this version')),
        h('p', { class: ['muted', 'small', !prev && v.op !== 'create' ? 'note-box' : ''], testid: 'diff-note' }, note),
        diffView(diff));
    } catch (err) {
      if (ctx.stale()) return;
      fill(viewer, errorBox(err, state.show === 'content' ? 'the content' : 'the diff'));
    }
  }

  // An extended attribute's version: its name, the permissions an ACL
  // left, and its value (never diffed against the file's content).
  async function showAttribute(v, viewer) {
    const x = v.xattr || {};
    // The name as recorded (headings are set in capitals; names are not).
    const head = h('div', { class: 'body-head' }, h('h3', null, `Attribute at #${v.seq}`),
      h('span', { class: 'mono small' }, x.name || ''),
      h('span', { class: 'muted small' }, x.removed ? 'removed' : v.size === null || v.size === undefined ? '' : fmtBytes(v.size)));
    const perms = x.acl !== undefined && x.acl !== null
      ? h('p', { class: 'note-box', testid: 'acl-note' }, `A permission change: the file's mode is ${modeText(v.mode)} and its ACL grants ${x.acl}.`)
      : null;
    if (x.removed || !v.content) {
      fill(viewer, head, perms, h('p', { class: 'muted', testid: 'no-content-note' },
        x.removed ? 'The attribute is gone after this operation.' : `Hash only: the record kept the value's SHA-256 (${v.sha256 || 'unknown'}).`));
      return;
    }
    fill(viewer, head, perms, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const c = await api(`api/sessions/${enc(id)}/content/${enc(v.content)}?view=1`);
      if (ctx.stale()) return;
      fill(viewer, head, perms,
        h('pre', { class: ['code', 'file-content', `body-${c.encoding}`], testid: 'xattr-value', 'data-encoding': c.encoding }, c.text ?? ''));
    } catch (err) {
      if (ctx.stale()) return;
      fill(viewer, head, perms, errorBox(err, 'the value'));
    }
  }

  drawList();
  drawDetail();
}

function modeText(mode) {
  return mode === null || mode === undefined ? 'unknown' : mode.toString(8).padStart(4, '0');
}

// The attribute an xattr version is about, under its operation.
function attributeLine(v) {
  if (!v.xattr) return v.op === 'chmod' && v.mode !== null && v.mode !== undefined ? h('span', { class: 'mono small' }, ` ${modeText(v.mode)}`) : null;
  const x = v.xattr;
  return h('div', { class: 'mono small', testid: 'xattr-name' },
    `${x.name}${x.removed ? ' removed' : ''}`,
    x.acl ? h('div', { class: 'small', testid: 'xattr-acl' }, `mode ${modeText(v.mode)} · acl: ${x.acl}`) : null);
}

function diffView(diff) {
  if (diff.binary) {
    return h('p', { class: 'note-box', testid: 'diff-view', 'data-binary': 'true' }, 'Binary content: no line diff. Download the versions to compare them.');
  }
  const lines = Array.isArray(diff.lines) ? diff.lines : [];
  let oldNo = 0;
  let newNo = 0;
  const rows = lines.map((l) => {
    const op = l.op === '+' ? '+' : l.op === '-' ? '-' : ' ';
    if (op !== '+') oldNo++;
    if (op !== '-') newNo++;
    return h('tr', { class: op === '+' ? 'add' : op === '-' ? 'del' : 'same', testid: 'diff-line', 'data-op': op },
      h('td', { class: 'ln' }, op === '+' ? '' : String(oldNo)),
      h('td', { class: 'ln' }, op === '-' ? '' : String(newNo)),
      h('td', { class: 'op-mark' }, op),
      h('td', { class: 'text' }, l.text ?? ''));
  });
  const added = lines.filter((l) => l.op === '+').length;
  const removed = lines.filter((l) => l.op === '-').length;
  return h('div', { class: 'diff-wrap' },
    h('p', { class: 'small diff-stats' }, h('span', { class: 'add-text' }, `+${added}`), ' ', h('span', { class: 'del-text' }, `−${removed}`)),
    h('table', { class: 'diff mono', testid: 'diff-view', 'data-binary': 'false' },
      h('tbody', null, rows.length ? rows : h('tr', null, h('td', { colspan: '4', class: 'empty' }, 'No change in content.')))));
}
