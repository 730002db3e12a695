// A fleet's sessions in the console, in a real browser (Chromium through
// playwright-core): each session's node and labels in the sessions list,
// and the list filtered by one label and by node, in the page and through
// the API. Driven by tests/console.rs, which records four `airlock run`
// sessions, each listed by its command `echo NAME`:
//
//   fleet-red-1       --label team=red --label pod=agent-1
//   fleet-red-2       --label team=red --label pod=agent-2
//   fleet-blue        --label team=blue=green --label 'owner=Zoë 日本'
//   fleet-unlabelled  no labels (as every session before labels)
//
// and passes:
//
//   CONSOLE_URL   the URL the console printed (with ?token=)
//   NODE_NAME     the node they were recorded on (this machine's name)
//   ARTIFACTS     where screenshots go
//   CHROMIUM      the browser (default /usr/bin/chromium)

import { chromium } from 'playwright-core';
import fs from 'node:fs/promises';
import path from 'node:path';

import { Failure, check, harness, requireEnv } from './harness.mjs';

const env = (name) => requireEnv('fleet-labels.test.mjs', name);

const CONSOLE_URL = env('CONSOLE_URL');
const NODE_NAME = env('NODE_NAME');
const ARTIFACTS = env('ARTIFACTS');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ALL = ['fleet-blue', 'fleet-red-1', 'fleet-red-2', 'fleet-unlabelled'];

const { step, setPage, finish } = harness({ name: 'fleet-labels', artifacts: ARTIFACTS });
let browser;
let page;
const problems = [];

/** Each listed row as a reader sees it: the session (by the name its
 * command echoes) and its Node and Labels cells, found by their headers. */
const rowsOnPage = () => page.evaluate(() => {
  const table = document.querySelector('[data-testid=sessions-table]');
  const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.replace(/[▲▼↕]/g, '').trim());
  const cell = (tr, name) => tr.children[heads.indexOf(name)];
  return [...table.querySelectorAll('[data-testid=session-row]')].map((tr) => ({
    name: (cell(tr, 'Command').textContent.match(/fleet-[a-z0-9-]+/) || ['?'])[0],
    node: cell(tr, 'Node').textContent.trim(),
    labels: [...cell(tr, 'Labels').querySelectorAll('[data-testid=label-chip]')].map((c) => c.textContent),
    labelsText: cell(tr, 'Labels').textContent.trim(),
  })).sort((a, b) => (a.name < b.name ? -1 : 1));
});

/** Waits until the list shows exactly these sessions. */
async function listShows(names) {
  const want = JSON.stringify([...names].sort());
  await page.waitForFunction((w) => {
    const table = document.querySelector('[data-testid=sessions-table]');
    if (!table || table.getAttribute('aria-busy') === 'true') return false;
    const got = [...table.querySelectorAll('[data-testid=session-row]')]
      .map((tr) => (tr.textContent.match(/fleet-[a-z0-9-]+/) || ['?'])[0]).sort();
    return JSON.stringify(got) === w;
  }, want, { timeout: 5000 }).catch(async () => {
    throw new Failure(`the list shows ${JSON.stringify((await rowsOnPage()).map((r) => r.name))}, not ${want}`);
  });
}

async function filterBy(name, value) {
  await page.fill(`[data-testid=filter-${name}]`, value);
  await page.press(`[data-testid=filter-${name}]`, 'Enter');
}

/** The API as the page calls it (the console's cookie is the browser's). */
async function apiSessions(query) {
  return page.evaluate(async (q) => {
    const res = await fetch(`api/sessions?${q}`);
    const body = await res.json();
    return { status: res.status, body };
  }, query);
}
const names = (answer) => answer.body.sessions.map((s) => (s.command.join(' ').match(/fleet-[a-z0-9-]+/) || ['?'])[0]).sort();

await fs.mkdir(ARTIFACTS, { recursive: true });
browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  timeout: 30_000,
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
context.setDefaultTimeout(10_000);
page = await context.newPage();
setPage(page);
page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));

await step('the console opens on every session of the fleet', async () => {
  const res = await page.goto(CONSOLE_URL, { waitUntil: 'domcontentloaded' });
  check(res && res.status() === 200, `the page answered ${res && res.status()}`);
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
  await listShows(ALL);
});

await step('each row shows its node and its labels', async () => {
  const rows = await rowsOnPage();
  const want = {
    'fleet-blue': ['owner=Zoë 日本', 'team=blue=green'],
    'fleet-red-1': ['pod=agent-1', 'team=red'],
    'fleet-red-2': ['pod=agent-2', 'team=red'],
    'fleet-unlabelled': [],
  };
  for (const r of rows) {
    check(r.node === NODE_NAME, `${r.name}'s node is ${JSON.stringify(r.node)}, not ${NODE_NAME}`);
    check(JSON.stringify(r.labels) === JSON.stringify(want[r.name]), `${r.name}'s labels are ${JSON.stringify(r.labels)}, not ${JSON.stringify(want[r.name])}`);
  }
  const unlabelled = rows.find((r) => r.name === 'fleet-unlabelled');
  check(unlabelled && unlabelled.labelsText === '—', `a session without labels shows ${JSON.stringify(unlabelled)}`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'fleet-labels-all.png') });
});

await step('filtering by one label shows only the sessions that carry it', async () => {
  await filterBy('label', 'team=red');
  await listShows(['fleet-red-1', 'fleet-red-2']);
  const hash = await page.evaluate(() => location.hash);
  check(/label=team(%3D|=)red/.test(hash), `the filter is not in the URL: ${hash}`);
  await filterBy('label', 'team=blue=green');
  await listShows(['fleet-blue']);
  await filterBy('label', 'owner=Zoë 日本');
  await listShows(['fleet-blue']);
  // Exact: neither a prefix nor another case.
  await filterBy('label', 'team=re');
  await listShows([]);
  await filterBy('label', 'Team=red');
  await listShows([]);
  await filterBy('label', 'nokey=x');
  await listShows([]);
  await page.screenshot({ path: path.join(ARTIFACTS, 'fleet-labels-none.png') });
  await filterBy('label', '');
  await listShows(ALL);
});

await step("clicking a row's label chip filters by that label", async () => {
  await page.locator('[data-testid=label-chip]', { hasText: 'pod=agent-2' }).click();
  await listShows(['fleet-red-2']);
  check(await page.inputValue('[data-testid=filter-label]') === 'pod=agent-2', 'the chip did not fill the label filter');
  await filterBy('label', '');
  await listShows(ALL);
});

await step('filtering by node shows the sessions that node recorded, and no other node\'s', async () => {
  await filterBy('node', NODE_NAME);
  await listShows(ALL);
  await filterBy('label', 'team=red');
  await listShows(['fleet-red-1', 'fleet-red-2']);
  await filterBy('node', `${NODE_NAME}-elsewhere`);
  await listShows([]);
  await page.click('[data-testid=filter-clear]');
  await listShows(ALL);
});

await step('no console error or page error happened while browsing', async () => {
  check(problems.length === 0, `the browser reported:\n       ${problems.join('\n       ')}`);
});

await step('the API filters the same way, and refuses a label that is not KEY=VALUE (a 400 the browser logs, after the check above)', async () => {
  const red = await apiSessions('label=team%3Dred');
  check(red.status === 200 && JSON.stringify(names(red)) === '["fleet-red-1","fleet-red-2"]', `label=team=red: ${JSON.stringify(red)}`);
  const both = await apiSessions('label=team%3Dred&label=pod%3Dagent-1');
  check(JSON.stringify(names(both)) === '["fleet-red-1"]', `two labels (AND): ${JSON.stringify(names(both))}`);
  const unicode = await apiSessions(`label=${encodeURIComponent('owner=Zoë 日本')}`);
  check(JSON.stringify(names(unicode)) === '["fleet-blue"]', `a unicode value: ${JSON.stringify(names(unicode))}`);
  const equals = await apiSessions('label=team=blue=green');
  check(JSON.stringify(names(equals)) === '["fleet-blue"]', `a value with '=' unencoded: ${JSON.stringify(names(equals))}`);
  const byNode = await apiSessions(`node=${encodeURIComponent(NODE_NAME)}`);
  check(names(byNode).length === 4, `node=${NODE_NAME}: ${JSON.stringify(names(byNode))}`);
  const row = red.body.sessions[0];
  check(row.node === NODE_NAME && row.labels.team === 'red', `a row's node and labels: ${JSON.stringify(row)}`);
  const bad = await apiSessions('label=team');
  check(bad.status === 400 && /has no '='/.test(JSON.stringify(bad.body)), `label=team: ${JSON.stringify(bad)}`);
  const search = await page.evaluate(async () => (await fetch(`api/search?command=echo&label=${encodeURIComponent('team=blue=green')}`)).json());
  const hitSessions = new Set(search.hits.map((h) => h.session));
  const blueId = (await apiSessions('label=team%3Dblue%3Dgreen')).body.sessions[0].id;
  check(hitSessions.size === 1 && hitSessions.has(blueId), `search by label: ${JSON.stringify(search)}`);
});

await browser.close();
finish('all fleet-labels browser checks passed');
