// The console on a fleet's central store (PostgreSQL), in a real browser
// (Chromium through playwright-core): every node's session in the list,
// those still running shown running and then ended as their nodes stop,
// without a reload; each with its node, its labels and its verification
// against the node's enrolled key; and the list filtered by one label and
// by node. Driven by tests/fleet.rs, which records five nodes into one
// store and passes:
//
//   CONSOLE_URL   the URL `airlock audit serve --audit-db postgres://…` printed
//   FLEET         JSON: [{id, node, team, pod, running}] for each node's session
//   SIGNALS       a directory: this test writes `running-seen` there once it
//                 has seen the running sessions, and waits for `checked`
//                 (every node stopped, shipped and enrolled) before its
//                 last checks
//   ARTIFACTS     where screenshots go
//   CHROMIUM      the browser (default /usr/bin/chromium)

import { chromium } from 'playwright-core';
import fs from 'node:fs/promises';
import { existsSync } from 'node:fs';
import path from 'node:path';

import { Failure, check, harness, requireEnv } from './harness.mjs';

const env = (name) => requireEnv('fleet-central.test.mjs', name);

const CONSOLE_URL = env('CONSOLE_URL');
const FLEET = JSON.parse(env('FLEET'));
const ARTIFACTS = env('ARTIFACTS');
const SIGNALS = env('SIGNALS');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ALL = FLEET.map((s) => s.id);
const where = (pred) => FLEET.filter(pred).map((s) => s.id);

const { step, setPage, finish } = harness({ name: 'fleet-central', artifacts: ARTIFACTS });
let page;
const problems = [];

/** Each listed row as a reader sees it: its session id, and its Node,
 * Labels and Verification cells, found by their headers. */
const rowsOnPage = () => page.evaluate(() => {
  const table = document.querySelector('[data-testid=sessions-table]');
  const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.replace(/[▲▼↕]/g, '').trim());
  const cell = (tr, name) => tr.children[heads.indexOf(name)];
  return [...table.querySelectorAll('[data-testid=session-row]')].map((tr) => ({
    id: tr.dataset.session,
    node: cell(tr, 'Node').textContent.trim(),
    running: Boolean(cell(tr, 'Duration').querySelector('.live-dot')),
    labels: [...cell(tr, 'Labels').querySelectorAll('[data-testid=label-chip]')].map((c) => c.textContent).sort(),
    verification: (cell(tr, 'Verification').querySelector('[data-testid=verification-badge]') || { dataset: {} }).dataset.outcome,
  }));
});

/** Waits until the list shows exactly these sessions. */
async function listShows(ids) {
  const want = JSON.stringify([...ids].sort());
  await page.waitForFunction((w) => {
    const table = document.querySelector('[data-testid=sessions-table]');
    if (!table || table.getAttribute('aria-busy') === 'true') return false;
    const got = [...table.querySelectorAll('[data-testid=session-row]')].map((tr) => tr.dataset.session).sort();
    return JSON.stringify(got) === w;
  }, want, { timeout: 10_000 }).catch(async () => {
    throw new Failure(`the list shows ${JSON.stringify((await rowsOnPage()).map((r) => r.id))}, not ${want}`);
  });
}

async function filterBy(name, value) {
  await page.fill(`[data-testid=filter-${name}]`, value);
  await page.press(`[data-testid=filter-${name}]`, 'Enter');
}

await fs.mkdir(ARTIFACTS, { recursive: true });
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  timeout: 30_000,
});
const context = await browser.newContext({ viewport: { width: 1400, height: 800 }, deviceScaleFactor: 1 });
context.setDefaultTimeout(10_000);
page = await context.newPage();
setPage(page);
page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));

await step('the console on the central store lists the session of every node', async () => {
  const res = await page.goto(CONSOLE_URL, { waitUntil: 'domcontentloaded' });
  check(res && res.status() === 200, `the page answered ${res && res.status()}`);
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
  await listShows(ALL);
});

await step('the sessions still running show as running, the others as ended', async () => {
  const rows = await rowsOnPage();
  for (const want of FLEET) {
    const r = rows.find((row) => row.id === want.id);
    check(r && r.running === want.running, `${want.node}'s session shows running=${r && r.running}, not ${want.running}`);
  }
  await page.screenshot({ path: path.join(ARTIFACTS, 'fleet-central-running.png') });
});
await fs.writeFile(path.join(SIGNALS, 'running-seen'), '');

await step('as their nodes stop, the list shows them ended without a reload', async () => {
  await page.waitForFunction(() => {
    const table = document.querySelector('[data-testid=sessions-table]');
    return table && table.querySelectorAll('[data-testid=session-row]').length > 0 && !table.querySelector('.live-dot');
  }, null, { timeout: 30_000 }).catch(async () => {
    throw new Failure(`still running: ${JSON.stringify((await rowsOnPage()).filter((r) => r.running).map((r) => r.node))}`);
  });
  await listShows(ALL);
});

await step('the test has stopped, shipped and enrolled every node', async () => {
  const deadline = Date.now() + 40_000;
  while (!existsSync(path.join(SIGNALS, 'checked'))) {
    check(Date.now() < deadline, 'tests/fleet.rs never wrote SIGNALS/checked');
    await new Promise((r) => setTimeout(r, 50));
  }
  // Verification is worked out when the list loads: once more, now that
  // every key is enrolled.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
  await listShows(ALL);
  await page.screenshot({ path: path.join(ARTIFACTS, 'fleet-central-all.png') });
});

await step("each row shows its node, its labels, and that it verifies against its node's enrolled key", async () => {
  const rows = await rowsOnPage();
  for (const want of FLEET) {
    const r = rows.find((row) => row.id === want.id);
    check(r, `no row for ${want.node}'s session ${want.id}`);
    check(r.node === want.node, `${want.id}'s node is ${JSON.stringify(r.node)}, not ${want.node}`);
    const labels = [`pod=${want.pod}`, `team=${want.team}`].sort();
    check(JSON.stringify(r.labels) === JSON.stringify(labels), `${want.node}'s labels are ${JSON.stringify(r.labels)}, not ${JSON.stringify(labels)}`);
    check(r.verification === 'intact', `${want.node}'s session shows ${JSON.stringify(r.verification)}, not intact`);
  }
});

await step('filtering by one label shows exactly the sessions that carry it', async () => {
  await filterBy('label', 'team=pay');
  await listShows(where((s) => s.team === 'pay'));
  await page.screenshot({ path: path.join(ARTIFACTS, 'fleet-central-team-pay.png') });
  await filterBy('label', 'team=search');
  await listShows(where((s) => s.team === 'search'));
  const one = FLEET[FLEET.length - 1];
  await filterBy('label', `pod=${one.pod}`);
  await listShows([one.id]);
  await filterBy('label', 'team=nobody');
  await listShows([]);
  await filterBy('label', '');
  await listShows(ALL);
});

await step('filtering by node shows that node\'s session only, and with a label, the two together', async () => {
  const one = FLEET[0];
  await filterBy('node', one.node);
  await listShows([one.id]);
  await filterBy('label', `team=${one.team === 'pay' ? 'search' : 'pay'}`);
  await listShows([]);
  await page.click('[data-testid=filter-clear]');
  await listShows(ALL);
});

await step('no console error or page error happened while browsing', async () => {
  check(problems.length === 0, `the browser reported:\n       ${problems.join('\n       ')}`);
});

await browser.close();
finish('all fleet-central browser checks passed');
