// The forensic console in a real browser (Chromium through playwright-core),
// driven by tests/console.rs, which records the sessions, starts
// `airlock audit serve` and passes what it knows in the environment:
//
//   CONSOLE_URL   the URL the console printed (with ?token=)
//   SESSION_ID    the recorded session (sh fetch-report.sh): allowed +
//                 refused request, a file written twice, coloured output,
//                 sh → sh -c → curl
//   SECRET        the injected credential: must never reach the browser
//   ARTIFACTS     where screenshots go
//   LIVE_MARKER   text in the live session's command line
//   LIVE_FIFO     the live session reads this FIFO before its request
//   FILE_PATH     the file written twice
//   BIG_FILE_PATH a file over the session's content cap (hash only)
//   EXISTING_FILE_PATH a file that existed before the session, appended to:
//                 its diff is from what it held before the session
//   EDITED_FILE_PATH   a file that existed before the session, edited with
//                 sed -i (a new file renamed over it)
//   HOSTILE_FILE_PATH  a file whose name and content are markup
//   ACL_FILE_PATH a 0700 script given an ACL granting uid 1000 rwx, and a
//                 user.origin attribute
//   DENIED_PATH   the refused request's path
//   REFUSED_BODY  the refused request's body
//   UPSTREAM_HOST the upstream's name
//   TAMPERED_ID   a session whose record was edited through SQLite
//   TAMPERED_SEQ  the event that was edited
//   CHROMIUM      the browser (default /usr/bin/chromium)
//   CONSOLE_TEST_TIMINGS=1  also print every request the page made, timed
//
// Each step says what it checks; the first failure names its step and ends
// the run with exit 1, after a screenshot of where it stood.

import { chromium } from 'playwright-core';
import fs from 'node:fs/promises';
import path from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`console.test.mjs: ${name} is not set (run it through tests/console.rs: cargo nextest run -p airlock --test console)`);
    process.exit(2);
  }
  return v;
};

const CONSOLE_URL = env('CONSOLE_URL');
const SID = env('SESSION_ID');
const SECRET = env('SECRET');
const ARTIFACTS = env('ARTIFACTS');
const LIVE_MARKER = env('LIVE_MARKER');
const LIVE_FIFO = env('LIVE_FIFO');
const FILE_PATH = env('FILE_PATH');
const BIG_FILE_PATH = env('BIG_FILE_PATH');
const EXISTING_FILE_PATH = env('EXISTING_FILE_PATH');
const EDITED_FILE_PATH = env('EDITED_FILE_PATH');
const HOSTILE_FILE_PATH = env('HOSTILE_FILE_PATH');
const ACL_FILE_PATH = env('ACL_FILE_PATH');
const DENIED_PATH = env('DENIED_PATH');
const REFUSED_BODY = env('REFUSED_BODY');
const UPSTREAM_HOST = env('UPSTREAM_HOST');
const TAMPERED_ID = env('TAMPERED_ID');
const TAMPERED_SEQ = env('TAMPERED_SEQ');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

const ORIGIN = new URL(CONSOLE_URL).origin;
const TOKEN = new URL(CONSOLE_URL).searchParams.get('token');
/** How soon a live event must show after it was recorded. */
const LIVE_LATENCY_MS = 1000;
const TOTAL_BUDGET_MS = 100_000;

const started = Date.now();
const watchdog = setTimeout(() => {
  console.error(`FAIL: the browser test ran over ${TOTAL_BUDGET_MS / 1000} s (stuck in step "${currentStep}")`);
  process.exit(1);
}, TOTAL_BUDGET_MS);

let currentStep = 'start';
let browser;
let page;

class Failure extends Error {}
function check(cond, message) {
  if (!cond) throw new Failure(message);
}

async function step(name, fn) {
  currentStep = name;
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (err) {
    console.error(`FAIL ${name}: ${err && err.message ? err.message : err}`);
    if (!(err instanceof Failure) && err && err.stack) console.error(err.stack);
    if (page) {
      const shot = path.join(ARTIFACTS, `failure-${name.replace(/[^a-z0-9]+/gi, '-')}.png`);
      await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
      console.error(`     screenshot: ${shot}; page URL: ${page.url()}`);
      const main = await page.locator('#app').innerText({ timeout: 1000 }).catch(() => '');
      if (main) console.error(`     page text: ${main.slice(0, 1500)}`);
    }
    if (problems.length) console.error(`     browser problems so far:\n       ${problems.join('\n       ')}`);
    if (browser) await browser.close().catch(() => {});
    process.exit(1);
  }
}

const shot = async (name, opts = {}) => {
  const file = path.join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: opts.fullPage ?? false });
  console.log(`     screenshot ${file}`);
};

/** Console errors, page errors and CSP violations: each one fails the run. */
const problems = [];
/** Every response body the browser received, to search for the secret. */
const received = [];
const pendingBodies = [];

async function apiGet(context, rel) {
  const res = await context.request.get(`${ORIGIN}/${rel}`);
  const body = await res.body();
  return { status: res.status(), headers: res.headers(), body, text: body.toString('utf8') };
}

async function apiJson(context, rel) {
  const r = await apiGet(context, rel);
  check(r.status === 200, `GET /${rel} answered ${r.status}: ${r.text.slice(0, 300)}`);
  try {
    return JSON.parse(r.text);
  } catch (e) {
    throw new Failure(`GET /${rel} is not JSON: ${r.text.slice(0, 200)}`);
  }
}

function hashPart() {
  return decodeURIComponent(new URL(page.url()).hash);
}

async function goto(hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForFunction((h) => location.hash.startsWith(h) && document.body.dataset.ready === 'true', hash);
}

await fs.mkdir(ARTIFACTS, { recursive: true });
for (const f of await fs.readdir(ARTIFACTS)) {
  if (f.startsWith('failure-')) await fs.rm(path.join(ARTIFACTS, f), { force: true });
}

// The page's terminal interpreter, run here on output a recording can hold
// (no DOM needed for Screen.text()).
await step('the terminal interpreter handles \\r, \\b, erases, cursor moves and drops unknown escapes', async () => {
  const { Screen } = await import('../../console/assets/ansi.js');
  const run = (chunks, cols = 20, rows = 5) => {
    const s = new Screen(cols, rows);
    for (const c of chunks) s.feed(c);
    return s.text();
  };
  const cases = [
    [['progress 10%\rprogress 99%\r\n'], 'progress 99%\n'],
    [['abc\bX\n'], 'abX\n'],
    [['hello world\r\x1b[Kbye\n'], 'bye\n'],
    [['line1\nline2\x1b[1A\rLINE1\n'], 'LINE1\nline2'],
    [['\x1b]0;window title\x07visible\n'], 'visible\n'],
    [['\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n'], 'link\n'],
    [['red \x1b[3', '1mtext\x1b[0m\n'], 'red text\n'],
    [['a\x1b[?25lb\x1b[?1049hc\n'], 'abc\n'],
    [['one\ntwo\x1b[2J\x1b[Hthree'], 'three\n'],
    [['tab\tx'], 'tab     x'],
    [['0123456789012345678901234'], '01234567890123456789\n01234'],
  ];
  for (const [chunks, want] of cases) {
    const got = run(chunks);
    check(got === want, `${JSON.stringify(chunks)} → ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
});

browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  timeout: 30_000,
});
const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
context.setDefaultTimeout(10_000);
page = await context.newPage();

page.on('console', (msg) => {
  if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`);
});
page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
page.on('dialog', (dialog) => { problems.push(`a dialog opened: ${dialog.message()}`); dialog.dismiss().catch(() => {}); });
if (process.env.CONSOLE_TEST_TIMINGS) {
  page.on('requestfinished', (req) => {
    const t = req.timing();
    console.log(`     [${Date.now() - started} ms] ${Math.round(t.responseEnd)} ms ${req.url().replace(ORIGIN, '')}`);
  });
}
page.on('response', (res) => {
  const type = res.headers()['content-type'] || '';
  if (type.startsWith('text/event-stream')) return; // never ends; the live events are checked through the API
  pendingBodies.push(res.body().then((b) => received.push({ url: res.url(), body: b })).catch(() => {}));
});

let session;
let events;

await step('the URL with the token opens the console, swaps the token for a cookie, and the page carries the CSP', async () => {
  const res = await page.goto(CONSOLE_URL, { waitUntil: 'domcontentloaded' });
  check(res && res.status() === 200, `the page answered ${res && res.status()}`);
  const csp = res.headers()['content-security-policy'] || '';
  for (const part of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"]) {
    check(csp.includes(part), `the page's Content-Security-Policy lacks ${part}: ${JSON.stringify(csp)}`);
  }
  check(!page.url().includes('token='), `the token is still in the address bar: ${page.url()}`);
  const cookies = await context.cookies(ORIGIN);
  check(cookies.some((c) => c.httpOnly && c.value === TOKEN), `no HttpOnly cookie holds the token: ${JSON.stringify(cookies.map((c) => c.name))}`);
});

await step('the sessions list shows the recorded session, and every column sorts', async () => {
  const row = page.locator(`[data-testid=sessions-table] [data-testid=session-row][data-session="${SID}"]`);
  await row.waitFor();
  const text = await row.innerText();
  check(text.includes('sh fetch-report.sh'), `the session's row does not show its command: ${text}`);
  check(/verified/.test(text), `the recorded session is not shown as verified: ${text}`);
  const headers = await page.locator('[data-testid=sessions-table] thead [data-testid^=sort-]').count();
  check(headers >= 8, `only ${headers} sortable columns`);
  await page.click('[data-testid=sort-denials]');
  let sorted = await page.getAttribute('[data-testid=sessions-table] th:has([data-testid=sort-denials])', 'aria-sort');
  check(sorted === 'descending', `after one click the denials column is ${sorted}`);
  check((await page.innerText('[data-testid=sort-denials]')).includes('▼'), 'no ▼ on the sorted column');
  await page.click('[data-testid=sort-denials]');
  sorted = await page.getAttribute('[data-testid=sessions-table] th:has([data-testid=sort-denials])', 'aria-sort');
  check(sorted === 'ascending', `after two clicks the denials column is ${sorted}`);
  await page.click('[data-testid=sort-started]');
  await shot('sessions');
});

await step('a tampered session is red, names its first bad event, and is never green', async () => {
  const row = page.locator(`[data-testid=session-row][data-session="${TAMPERED_ID}"]`);
  await row.waitFor();
  const listBadge = row.locator('[data-testid=verification-badge]');
  check(await listBadge.getAttribute('data-outcome') === 'tampered', `the list's badge: ${await listBadge.innerText()}`);
  await goto(`#/s/${TAMPERED_ID}`);
  const badge = page.locator('[data-testid=session-header] [data-testid=verification-badge]');
  const text = await badge.innerText();
  check(text.startsWith(`TAMPERED — first bad event #${TAMPERED_SEQ}: `) && text.length > `TAMPERED — first bad event #${TAMPERED_SEQ}: `.length,
    `the badge reads ${JSON.stringify(text)}`);
  check(!/verified/.test(text), 'a tampered session is called verified');
  const bg = await badge.evaluate((el) => getComputedStyle(el).backgroundColor);
  check(bg === 'rgb(179, 38, 30)', `the tampered badge is not red: ${bg}`);
  check((await page.innerText('[data-testid=tamper-warning]')).includes(`Event #${TAMPERED_SEQ} is the first`), 'no warning over the tampered timeline');
  check(await page.locator(`[data-testid=timeline-row][data-seq="${TAMPERED_SEQ}"].suspect`).count() === 1, 'the altered event is not marked');
  await shot('tampered');
  await goto('#/');
});

await step('the sessions list filters by the host contacted', async () => {
  await page.fill('[data-testid=filter-host]', UPSTREAM_HOST);
  await page.press('[data-testid=filter-host]', 'Enter');
  await page.waitForFunction(() => /match the filters/.test(document.querySelector('[data-testid=sessions-status]').textContent));
  await page.locator(`[data-testid=session-row][data-session="${SID}"]`).waitFor();
  check(hashPart().includes(`host=${UPSTREAM_HOST}`), `the filter is not in the address: ${hashPart()}`);
  await page.fill('[data-testid=filter-host]', 'nobody-contacted.invalid');
  await page.press('[data-testid=filter-host]', 'Enter');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=session-row]').length === 0
    && /^0 sessions/.test(document.querySelector('[data-testid=sessions-status]').textContent));
  await page.click('[data-testid=filter-clear]');
  await page.locator(`[data-testid=session-row][data-session="${SID}"]`).waitFor();
  // Also the other filters reach the API without an error.
  await page.check('[data-testid=filter-denied]');
  await page.locator(`[data-testid=session-row][data-session="${SID}"]`).waitFor();
  await page.selectOption('[data-testid=filter-verification]', 'intact');
  await page.locator(`[data-testid=session-row][data-session="${SID}"]`).waitFor();
  await page.selectOption('[data-testid=filter-verification]', 'tampered');
  await page.waitForFunction(() => /^0 sessions/.test(document.querySelector('[data-testid=sessions-status]').textContent));
  await page.click('[data-testid=filter-clear]');
  await page.locator(`[data-testid=session-row][data-session="${SID}"]`).waitFor();
  if (await page.locator('[data-testid=error]').count() > 0) {
    throw new Failure(`an error is shown: ${await page.locator('[data-testid=error]').first().innerText()}`);
  }
});

let deniedSeq;
await step('the cross-session search finds the refused request and links to it', async () => {
  await page.fill('[data-testid=search-host]', UPSTREAM_HOST);
  await page.selectOption('[data-testid=search-verdict]', 'deny');
  await page.click('[data-testid=search-run]');
  const hit = page.locator(`[data-testid=search-hit][data-session="${SID}"]`).first();
  await hit.waitFor();
  const text = await hit.innerText();
  check(text.includes(DENIED_PATH), `the search hit does not name ${DENIED_PATH}: ${text}`);
  deniedSeq = Number(await hit.getAttribute('data-seq'));
  await hit.locator('[data-testid=search-hit-link]').click();
  await page.waitForFunction((s) => location.hash === `#/s/${s.sid}/e/${s.seq}` && document.body.dataset.ready === 'true', { sid: SID, seq: deniedSeq });
  await page.locator('[data-testid=rule-to-add]').waitFor();
});

await step('the session page shows the command, policy, limits, end and a green verified badge', async () => {
  await goto('#/');
  await page.click(`[data-testid=session-row][data-session="${SID}"] [data-testid=session-link]`);
  await page.waitForFunction((sid) => location.hash === `#/s/${sid}` && document.body.dataset.ready === 'true', SID);
  session = await apiJson(context, `api/sessions/${SID}`);
  const cmd = await page.innerText('[data-testid=session-command]');
  check(cmd === 'sh fetch-report.sh', `the header's command is ${cmd}`);
  check((await page.innerText('[data-testid=session-invocation]')).includes('airlock run --policy'), 'the header does not show how airlock was run');
  const badge = page.locator('[data-testid=session-header] [data-testid=verification-badge]');
  check(await badge.getAttribute('data-outcome') === 'intact', `the badge says ${await badge.getAttribute('data-outcome')}: ${await badge.innerText()}`);
  check((await badge.innerText()).includes('verified'), `the badge reads ${await badge.innerText()}`);
  check(await badge.evaluate((el) => getComputedStyle(el).backgroundColor) !== 'rgba(0, 0, 0, 0)', 'the badge has no colour');
  check((await page.innerText('[data-testid=policy-sha256]')).includes(session.policy_sha256), 'the policy SHA-256 is not shown');
  check(await page.getAttribute('[data-testid=key-trust]', 'data-trust') === 'trusted', 'the signer is not shown as the trusted key');
  check(!(await page.isVisible('[data-testid=policy-text]')), 'the policy text shows before it is asked for');
  await page.click('[data-testid=policy-details] summary');
  await page.locator('[data-testid=policy-text]').waitFor({ state: 'visible' });
  check((await page.innerText('[data-testid=policy-text]')).includes('[[credential]]'), 'the policy text is not the policy');
  check((await page.innerText('[data-testid=session-end]')).includes('exit 0'), 'the end is not exit 0');
  await page.locator('[data-testid=session-limits]').waitFor();
  for (const fmt of ['har', 'jsonl', 'cast']) {
    const href = await page.getAttribute(`[data-testid=export-${fmt}]`, 'href');
    check(href === `api/sessions/${SID}/export/${fmt}`, `the ${fmt} export links to ${href}`);
  }
  await page.click('[data-testid=policy-details] summary');
});

let curlAdmin;
await step('the process tree collapses and expands down to sh → sh -c → curl, with argv, cwd, exit and duration', async () => {
  const tree = await apiJson(context, `api/sessions/${SID}/tree`);
  check(tree.execs.length >= 4, `the tree has ${tree.execs.length} execs`);
  curlAdmin = tree.execs.find((x) => x.argv.some((a) => a.includes(DENIED_PATH)) && x.argv[0].endsWith('curl'));
  check(curlAdmin, `no curl exec with ${DENIED_PATH} in the tree: ${JSON.stringify(tree.execs.map((x) => x.argv))}`);
  await page.click('[data-testid=tree-collapse-all]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=tree-node]').length === 1);
  const root = page.locator('[data-testid=tree-node][data-depth="0"]');
  check(await root.getAttribute('aria-expanded') === 'false', 'the collapsed root says it is expanded');
  await root.locator(':scope > .node-row [data-testid=tree-toggle]').click();
  await page.locator('[data-testid=tree-node][data-depth="1"]').first().waitFor();
  check(await page.locator(`[data-testid=tree-node][data-exec="${curlAdmin.exec_id}"]`).count() === 0, 'the grandchild shows under a collapsed parent');
  const innerSh = page.locator(`[data-testid=tree-node][data-exec="${curlAdmin.parent}"]`);
  check(await innerSh.count() === 1, 'the sh -c that ran curl is not a child of the root');
  await innerSh.locator(':scope > .node-row [data-testid=tree-toggle]').click();
  const node = page.locator(`[data-testid=tree-node][data-exec="${curlAdmin.exec_id}"]`);
  await node.waitFor();
  check(await node.getAttribute('data-depth') === '2', `curl is at depth ${await node.getAttribute('data-depth')}`);
  const nodeText = await node.innerText();
  check(nodeText.includes(DENIED_PATH), `the node's argv: ${nodeText}`);
  check(nodeText.includes('exit 0'), `the node's exit status: ${nodeText}`);
  check(nodeText.includes(curlAdmin.cwd), `the node's cwd: ${nodeText}`);
  check(/\d+ ms|\d\.\d+ s/.test(nodeText), `the node's duration: ${nodeText}`);
  check(nodeText.includes('refused'), `the node does not flag its refusal: ${nodeText}`);
  // Selecting the node filters the timeline to its events.
  await node.locator(':scope > .node-row [data-testid=tree-label]').click();
  await page.locator('[data-testid=exec-filter-pill]').waitFor();
  const execs = await page.$$eval('[data-testid=timeline-row]', (rows) => rows.map((r) => r.dataset.exec));
  check(execs.length > 0 && execs.every((e) => e === curlAdmin.exec_id), `the filtered timeline shows other processes' events: ${execs}`);
  check(await page.locator('[data-testid=timeline-row][data-verdict=deny]').count() >= 1, 'the selected curl\'s refusal is not in its timeline');
  await shot('session-tree-selected');
  await page.click('[data-testid=exec-filter-clear]');
  await page.click('[data-testid=tree-expand-all]');
});

await step('the timeline shows every kind, filters by kind, and marks the refusal red', async () => {
  events = (await apiJson(context, `api/sessions/${SID}/events`)).events;
  const rows = page.locator('[data-testid=timeline-row]');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid=timeline-row]').length === n, events.length);
  const kinds = new Set(events.map((e) => e.kind));
  for (const k of ['exec', 'http', 'file', 'output']) check(kinds.has(k), `no ${k} event recorded: ${[...kinds]}`);
  const deny = page.locator('[data-testid=timeline-row][data-verdict=deny]').first();
  check(await deny.count() === 1, 'no refused row');
  const bg = await deny.evaluate((el) => getComputedStyle(el).backgroundColor);
  check(/rgb\((2[0-5]\d), (1\d\d|2[0-4]\d), (1\d\d|2[0-4]\d)\)/.test(bg) && bg !== 'rgb(255, 255, 255)', `the refused row is not red: ${bg}`);
  await page.fill('[data-testid=timeline-text]', 'notes.txt');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=timeline-row]').length >= 1
    && [...document.querySelectorAll('[data-testid=timeline-row]')].every((r) => r.textContent.includes('notes.txt')));
  await page.fill('[data-testid=timeline-text]', '');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid=timeline-row]').length === n, events.length);
  await page.uncheck('[data-testid=kind-output]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=timeline-row][data-kind=output]').length === 0);
  const left = await rows.count();
  check(left === events.filter((e) => e.kind !== 'output').length, `${left} rows once output is hidden`);
  await page.check('[data-testid=kind-output]');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid=timeline-row]').length === n, events.length);
  await shot('session', { fullPage: true });
});

await step('the refused request shows its method, URL, verdict, the rule to add and the body it tried to send', async () => {
  const denied = events.find((e) => e.kind === 'http' && e.verdict === 'deny');
  check(denied, 'no refused http event');
  await page.click(`[data-testid=timeline-row][data-seq="${denied.seq}"] [data-testid=timeline-link]`);
  await page.waitForFunction((s) => location.hash === s && document.body.dataset.ready === 'true', `#/s/${SID}/e/${denied.seq}`);
  check(await page.innerText('[data-testid=request-method]') === 'POST', 'method');
  const body = await page.innerText('[data-testid=request-body]');
  check(body.includes(REFUSED_BODY) && !body.includes('No body'), `the refused request's body: ${body}`);
  check((await page.innerText('[data-testid=request-url]')).endsWith(DENIED_PATH), `url ${await page.innerText('[data-testid=request-url]')}`);
  check(await page.getAttribute('[data-testid=request-verdict]', 'data-verdict') === 'deny', 'the verdict is not deny');
  const rule = await page.innerText('[data-testid=rule-to-add]');
  check(rule.includes('[[allow]]') && rule.includes(UPSTREAM_HOST) && rule.includes(DENIED_PATH), `the rule to add: ${rule}`);
  check((await page.innerText('[data-testid=event-exec]')).includes(DENIED_PATH), 'the exec that sent it is not shown with its argv');
  await shot('request-denied', { fullPage: true });
  await page.click('[data-testid=exec-link]');
  await page.waitForFunction(() => document.body.dataset.ready === 'true' && /exec=/.test(location.hash));
  await page.locator('[data-testid=tree-node].selected').waitFor();
});

await step('the allowed request shows its headers with the credential as [secret:api], its JSON body, timings and the exec', async () => {
  const allowed = events.find((e) => e.kind === 'http' && e.verdict === 'allow');
  check(allowed, 'no allowed http event');
  await goto(`#/s/${SID}/e/${allowed.seq}`);
  check((await page.innerText('[data-testid=request-url]')).includes('/echo?from=console'), 'url');
  check((await page.innerText('[data-testid=request-status]')) === '200', `status ${await page.innerText('[data-testid=request-status]')}`);
  const headers = await page.innerText('[data-testid=request-headers]');
  check(/\[secret:api\]/.test(headers), `the injected credential is not shown as [secret:api]: ${headers}`);
  check((await page.innerText('[data-testid=request-rule]')).length > 1, 'the deciding rule is not shown');
  check(/headers after/.test(await page.innerText('[data-testid=request-timings]')), 'no timings');
  const body = page.locator('[data-testid=response-body]');
  check(await body.getAttribute('data-encoding') === 'json', `the response body is ${await body.getAttribute('data-encoding')}`);
  check((await body.innerText()).includes('\n  "'), 'the JSON body is not pretty-printed');
  await shot('request', { fullPage: true });
});

await step('the files page lists the file with both versions, its content and the diff between them', async () => {
  await goto(`#/s/${SID}`);
  await page.click('[data-testid=tab-files]');
  await page.waitForFunction(() => /\/files/.test(location.hash) && document.body.dataset.ready === 'true');
  const item = page.locator(`[data-testid=file-item][data-path="${FILE_PATH}"]`);
  await item.waitFor();
  await item.locator('button').click();
  const versions = page.locator('[data-testid=file-version]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=file-version]').length >= 2);
  check(await versions.count() >= 2, `${await versions.count()} versions`);
  const last = versions.last();
  await last.locator('[data-testid=view-diff]').click();
  const diff = page.locator('[data-testid=diff-view]');
  await diff.waitFor();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=diff-line][data-op="+"]')].some((l) => l.textContent.includes('gamma')));
  const removed = await page.$$eval('[data-testid=diff-line][data-op="-"]', (ls) => ls.map((l) => l.textContent));
  check(removed.some((t) => t.includes('beta')), `the diff removes no beta line: ${removed}`);
  await shot('files-diff', { fullPage: true });
  // The first version: a create, diffed against empty.
  await versions.first().locator('[data-testid=view-diff]').click();
  await page.waitForFunction(() => /every line is new|not recorded|whole/.test(document.querySelector('[data-testid=diff-note]')?.textContent || ''));
  await last.locator('[data-testid=view-content]').click();
  const content = page.locator('[data-testid=file-content]');
  await content.waitFor();
  check((await content.innerText()).includes('gamma'), `content: ${await content.innerText()}`);
  const dl = await last.locator('[data-testid=download-content]').getAttribute('href');
  check(dl && dl.startsWith(`api/sessions/${SID}/content/`), `download link ${dl}`);
  // A version over the cap: its hash, marked as all the record kept.
  await page.locator(`[data-testid=file-item][data-path="${BIG_FILE_PATH}"] button`).click();
  await page.locator('[data-testid=hash-only]').first().waitFor();
  check((await page.innerText('[data-testid=hash-only]')).includes('hash only (over the cap)'), `the big file's mark: ${await page.innerText('[data-testid=hash-only]')}`);
  check((await page.innerText('[data-testid=hash-only-note]')).includes('over the cap'), 'no note that only the hash was kept');
  check(await page.locator('[data-testid=file-version] [data-testid=download-content]').count() === 0, 'a hash-only version offers a download');
  // A file that was there before: its first version is what it held before
  // the session, and the session's change is a real before/after diff.
  await page.locator(`[data-testid=file-item][data-path="${EXISTING_FILE_PATH}"] button`).click();
  await page.locator('[data-testid=file-version]').first().waitFor();
  const firstOp = await page.getAttribute('[data-testid=file-version] >> nth=0', 'data-op');
  check(firstOp === 'original', `the first version of a file that existed is a ${firstOp}, not what it held before the session`);
  await page.locator('[data-testid=file-version]').last().locator('[data-testid=view-diff]').click();
  await page.waitForFunction(() => /before the session/.test(document.querySelector('[data-testid=diff-note]')?.textContent || ''));
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=diff-line][data-op="+"]')].some((l) => l.textContent.includes('appended in the session')));
  const kept = await page.$$eval('[data-testid=diff-line][data-op=" "]', (ls) => ls.map((l) => l.textContent));
  check(kept.some((t) => t.includes('there before the session')), `the diff does not keep what was there before: ${kept}`);
  check(await page.locator('[data-testid=diff-line][data-op="-"]').count() === 0, 'an append removed lines in the diff');
  check(!/not recorded/.test(await page.innerText('[data-testid=diff-note]')), 'the page still says the earlier content is not recorded');
  await shot('files-before-after', { fullPage: true });
  // Edited the way editors save (a new file renamed over it): the rename
  // brings the new content, diffed against what the file held before.
  await page.locator(`[data-testid=file-item][data-path="${EDITED_FILE_PATH}"] button`).click();
  await page.locator('[data-testid=file-version]').first().waitFor();
  const editedOps = await page.$$eval('[data-testid=file-version]', (vs) => vs.map((v) => v.dataset.op));
  check(editedOps[0] === 'original' && editedOps[editedOps.length - 1] === 'rename', `the edited file's versions: ${editedOps}`);
  await page.locator('[data-testid=file-version]').last().locator('[data-testid=view-diff]').click();
  await page.waitForFunction(() => /before the session/.test(document.querySelector('[data-testid=diff-note]')?.textContent || ''));
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=diff-line][data-op="+"]')].some((l) => l.textContent.includes('ONE')));
  const editedOut = await page.$$eval('[data-testid=diff-line][data-op="-"]', (ls) => ls.map((l) => l.textContent));
  check(editedOut.length === 1 && editedOut[0].includes('one'), `the sed -i diff removes: ${editedOut}`);
  await shot('files-edited-by-rename', { fullPage: true });
  // Markup chosen by the sandboxed program stays text, in its name and content.
  const hostile = page.locator(`[data-testid=file-item][data-path="${HOSTILE_FILE_PATH}"]`);
  check((await hostile.innerText()).includes('page<i>.html'), `the hostile file's name: ${await hostile.innerText()}`);
  await hostile.locator('button').click();
  await page.locator('[data-testid=file-version]').first().locator('[data-testid=view-content]').click();
  await page.waitForFunction(() => (document.querySelector('[data-testid=file-content]')?.textContent || '').includes('<script>alert(2)</script>'));
  check(await page.locator('#app img, #app script, #app i').count() === 0, 'recorded markup became elements');
  // An ACL is a permission change: its version says the mode it left and
  // what it grants; an attribute's value is shown, never diffed.
  await page.locator(`[data-testid=file-item][data-path="${ACL_FILE_PATH}"] button`).click();
  const acl = page.locator('[data-testid=file-version][data-op=xattr]', { hasText: 'system.posix_acl_access' });
  await acl.waitFor();
  const aclText = await acl.innerText();
  check(/mode 0770/.test(aclText) && aclText.includes('user:1000:rwx'), `the ACL version: ${aclText}`);
  await acl.locator('[data-testid=view-value]').click();
  await page.waitForFunction(() => /permission change: the file's mode is 0770 and its ACL grants user::rwx, user:1000:rwx/.test(document.querySelector('[data-testid=acl-note]')?.textContent || ''));
  const origin = page.locator('[data-testid=file-version][data-op=xattr]', { hasText: 'user.origin' });
  await origin.locator('[data-testid=view-value]').click();
  await page.waitForFunction(() => (document.querySelector('[data-testid=xattr-value]')?.textContent || '').includes('set in the session'));
  await shot('files-xattr', { fullPage: true });
  // A file event's own page: the record as a table, linked to the versions.
  const fileEvent = events.find((e) => e.kind === 'file');
  await goto(`#/s/${SID}/e/${fileEvent.seq}`);
  check(await page.getAttribute('[data-testid=event-record]', 'data-kind') === 'file', 'the file event page is not a file record');
  check((await page.innerText('[data-testid=event-fields]')).includes('sha256'), 'the file record lacks its sha256');
  const outputEvent = events.find((e) => e.kind === 'output' && e.summary.includes('allowed: 200'));
  check(outputEvent, 'no output event with allowed: 200');
  await goto(`#/s/${SID}/e/${outputEvent.seq}`);
  check((await page.innerText('[data-testid=output-text]')).includes('allowed: 200'), 'the output event does not show its text');
  await goto(`#/s/${SID}/e/${fileEvent.seq}`);
  await page.click('[data-testid=file-link]');
  await page.waitForFunction(() => /\/files\?path=/.test(location.hash) && document.body.dataset.ready === 'true');
  await page.locator('[data-testid=file-item].selected').waitFor();
});

await step('the terminal plays the coloured output back, pauses at the end, and seeks', async () => {
  await page.click('[data-testid=tab-terminal]');
  await page.waitForFunction(() => /\/terminal/.test(location.hash) && document.body.dataset.ready === 'true');
  const screen = page.locator('[data-testid=terminal-screen]');
  await page.waitForFunction(() => document.querySelector('[data-testid=terminal-screen]')?.textContent.includes('done'));
  const full = await screen.innerText();
  check(full.includes('allowed: 200') && full.includes('refused'), `the screen: ${full}`);
  check(!full.includes('\u001b') && !full.includes('[1;36m'), `escape sequences on screen: ${JSON.stringify(full)}`);
  check(await screen.locator('span.fg-2, span.fg-10').count() >= 1, 'no green text (SGR 32) on screen');
  check(await screen.locator('span.fg-1').count() >= 1, 'no red text (SGR 31) on screen');
  await page.click('[data-testid=terminal-play]');
  await page.waitForFunction(() => document.querySelector('[data-testid=terminal-play]').dataset.state === 'playing'
    || document.querySelector('[data-testid=terminal-screen]').dataset.atEnd === 'true');
  await page.waitForFunction(() => document.querySelector('[data-testid=terminal-screen]').dataset.atEnd === 'true'
    && document.querySelector('[data-testid=terminal-play]').dataset.state === 'paused', null, { timeout: 30_000 });
  check((await screen.innerText()).includes('done'), 'after playing, the screen lacks the last output');
  const seek = page.locator('[data-testid=terminal-seek]');
  await seek.evaluate((el) => { el.value = '0'; el.dispatchEvent(new Event('input', { bubbles: true })); });
  await page.waitForFunction(() => !document.querySelector('[data-testid=terminal-screen]').textContent.includes('done'));
  check(/^0:00\.0/.test(await page.innerText('[data-testid=terminal-time]')), `time after seeking to 0: ${await page.innerText('[data-testid=terminal-time]')}`);
  await seek.evaluate((el) => { el.value = el.max; el.dispatchEvent(new Event('input', { bubbles: true })); });
  await page.waitForFunction(() => document.querySelector('[data-testid=terminal-screen]').textContent.includes('done'));
  await shot('terminal');
});

await step('the HAR export downloads through its link and holds both requests', async () => {
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.click('[data-testid=export-har]'),
  ]);
  const file = await download.path();
  const text = await fs.readFile(file, 'utf8');
  check(!text.includes(SECRET), 'the downloaded HAR holds the secret');
  let har;
  try { har = JSON.parse(text); } catch (e) { throw new Failure(`the HAR is not JSON: ${text.slice(0, 200)}`); }
  const entries = har && har.log && har.log.entries;
  check(Array.isArray(entries) && entries.length >= 2, `the HAR has ${entries && entries.length} entries`);
  check(entries.some((e) => e.request.url.endsWith(DENIED_PATH)), 'the HAR lacks the refused request');
  await fs.writeFile(path.join(ARTIFACTS, 'session.har'), text);
});

await step('no endpoint serves the secret, and no page showed it', async () => {
  const paths = [
    'api/sessions', `api/sessions/${SID}`, `api/sessions/${SID}/events`, `api/sessions/${SID}/tree`,
    `api/sessions/${SID}/files`, `api/sessions/${SID}/export/har`, `api/sessions/${SID}/export/jsonl`,
    `api/sessions/${SID}/export/cast`,
    `api/search?host=${UPSTREAM_HOST}`, 'api/search?verdict=deny', 'api/search?command=curl',
    `api/search?file=${encodeURIComponent(FILE_PATH)}`, `api/search?url=/echo&session=${SID}`,
  ];
  const raw = await apiJson(context, `api/sessions/${SID}/events?after=0`);
  for (const e of raw.events) paths.push(`api/sessions/${SID}/events/${e.seq}`);
  const files = await apiJson(context, `api/sessions/${SID}/files`);
  for (const f of files.files) {
    let prev = null;
    for (const v of f.versions) {
      if (v.content) {
        paths.push(`api/sessions/${SID}/content/${v.content}`, `api/sessions/${SID}/content/${v.content}?view=1`,
          `api/sessions/${SID}/diff?from=${prev || 'empty'}&to=${v.content}`);
        prev = v.content;
      }
    }
  }
  for (const p of paths) {
    const r = await apiGet(context, p);
    check(r.status === 200, `GET /${p} answered ${r.status}: ${r.text.slice(0, 200)}`);
    check(!r.text.includes(SECRET), `GET /${p} holds the secret`);
  }
  const download = await apiGet(context, `api/sessions/${SID}/export/har`);
  check(/attachment/.test(download.headers['content-disposition'] || ''), 'the export is not an attachment');
  await Promise.all(pendingBodies);
  check(received.length > 10, `only ${received.length} responses seen`);
  for (const r of received) check(!r.body.includes(SECRET), `the browser received the secret from ${r.url}`);
  const shown = await page.evaluate(() => document.documentElement.outerHTML);
  check(!shown.includes(SECRET), 'the page shows the secret');
  console.log(`     ${paths.length} endpoints and ${received.length} browser responses checked`);
});

await step('a request without the token gets 401', async () => {
  const fresh = await browser.newContext();
  const p2 = await fresh.newPage();
  const res = await p2.goto(`${ORIGIN}/`);
  check(res.status() === 401, `the page without the token answered ${res.status()}`);
  const body = await res.text();
  check(!body.includes('sessions'), 'the 401 shows data');
  for (const rel of ['api/sessions', `api/sessions/${SID}`, `api/sessions/${SID}/export/har`, 'assets/app.js']) {
    const r = await fetch(`${ORIGIN}/${rel}`);
    check(r.status === 401, `GET /${rel} without the token answered ${r.status}`);
    const wrong = await fetch(`${ORIGIN}/${rel}`, { headers: { Authorization: `Bearer ${'0'.repeat(64)}` } });
    check(wrong.status === 401, `GET /${rel} with a wrong token answered ${wrong.status}`);
  }
  const bearer = await fetch(`${ORIGIN}/api/sessions`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  check(bearer.status === 200, `GET /api/sessions with the bearer token answered ${bearer.status}`);
  await fresh.close();
});

await step('a live session gains its refused request within a second, then ends', async () => {
  // The live session was started after the console; find it.
  let live;
  const deadline = Date.now() + 20_000;
  while (!live && Date.now() < deadline) {
    const list = await apiJson(context, 'api/sessions');
    live = list.sessions.find((s) => (s.command_line || '').includes(LIVE_MARKER));
    if (!live) await new Promise((r) => setTimeout(r, 200));
  }
  check(live, `no session with ${LIVE_MARKER} in its command appeared within 20 s`);
  check(live.end === null, `the live session has already ended: ${live.end}`);
  await goto('#/');
  const liveRow = page.locator(`[data-testid=session-row][data-session="${live.id}"]`);
  await liveRow.waitFor();
  check((await liveRow.innerText()).includes('running'), `the live session's row: ${await liveRow.innerText()}`);
  await goto(`#/s/${live.id}`);
  await page.locator('[data-testid=live-indicator]').waitFor();
  const running = await page.getAttribute('[data-testid=session-header] [data-testid=verification-badge]', 'data-outcome');
  check(running === 'incomplete', `a running session's badge is ${running}, not incomplete`);
  await shot('live-running');
  const before = await page.locator('[data-testid=timeline-row]').count();
  check(await page.locator('[data-testid=timeline-row][data-verdict=deny]').count() === 0, 'a refusal shows before the request');
  await page.locator('[data-testid=live-indicator][data-state=open]').waitFor(); // the stream is open
  // Let the session go on: it reads the FIFO, then sends the request.
  await fs.writeFile(LIVE_FIFO, 'go\n');
  const row = page.locator('[data-testid=timeline-row][data-verdict=deny]');
  await row.waitFor({ timeout: 20_000 });
  // When the page added the row (by its own clock, the same as ours).
  const seenAt = Number(await row.getAttribute('data-shown-at')) || Date.now();
  const highlighted = await row.evaluate((el) => el.classList.contains('fresh-deny'));
  const seq = Number(await row.getAttribute('data-seq'));
  const detail = await apiJson(context, `api/sessions/${live.id}/events/${seq}`);
  check(detail.event.url.includes(LIVE_MARKER), `the refused row is ${detail.event.url}`);
  const latency = seenAt - detail.ts_us / 1000;
  console.log(`     the refusal showed ${Math.round(latency)} ms after it was recorded`);
  check(latency < LIVE_LATENCY_MS, `the refusal showed ${Math.round(latency)} ms after it was recorded (more than ${LIVE_LATENCY_MS} ms)`);
  check(highlighted, 'the new refusal is not highlighted');
  await shot('live', { fullPage: true });
  check(await page.locator('[data-testid=timeline-row]').count() > before, 'no row was added');
  await page.waitForFunction((id) => [...document.querySelectorAll('[data-testid=tree-node]')].some((n) => n.textContent.includes('curl')), live.id);
  await page.locator('[data-testid=live-ended]').waitFor({ timeout: 30_000 });
  await page.locator('[data-testid=session-end]').waitFor();
  const rows = await page.locator('[data-testid=timeline-row]').count();
  const all = (await apiJson(context, `api/sessions/${live.id}/events`)).events.length;
  check(rows === all, `the live page shows ${rows} rows, the session has ${all} events`);
});

await step('no console error, page error or CSP violation happened', async () => {
  check(await page.evaluate(() => document.querySelectorAll('img[src="x"], #app script').length) === 0, 'recorded markup became elements');
  await Promise.all(pendingBodies);
  check(problems.length === 0, `the browser reported:\n       ${problems.join('\n       ')}`);
});

clearTimeout(watchdog);
await browser.close();
console.log(`all browser checks passed in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${ARTIFACTS}`);
process.exit(0);
