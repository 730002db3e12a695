// A live session (`airlock session`) in the console, in a real browser
// (Chromium through playwright-core), as a new user first meets it; driven
// by tests/console.rs, which starts the session (one step done) and
// `airlock audit serve`, and passes:
//
//   CONSOLE_URL   the URL the console printed (with ?token=)
//   LIVE_ID       the live session (as `airlock session` names it), one
//                 step done, still running
//   LIVE_NAME     its --name, which the sessions list shows
//   AIRLOCK       the binary: this script sends the session's next steps
//                 and stops it, as its user would from a terminal
//   ARTIFACTS     where screenshots go
//   CHROMIUM      the browser (default /usr/bin/chromium)
//
// Checks: the header's step count follows the steps as they start; the
// sessions page has its search box above the list; a stopped session's End
// cell shows `airlock session stop` as code, not backticks, on one line.

import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`live-session.test.mjs: ${name} is not set (run it through tests/console.rs)`);
    process.exit(2);
  }
  return v;
};

const CONSOLE_URL = env('CONSOLE_URL');
const LIVE_ID = env('LIVE_ID');
const LIVE_NAME = env('LIVE_NAME');
const AIRLOCK = env('AIRLOCK');
const ARTIFACTS = env('ARTIFACTS');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TOTAL_BUDGET_MS = 60_000;

const watchdog = setTimeout(() => {
  console.error(`FAIL: the browser test ran over ${TOTAL_BUDGET_MS / 1000} s (stuck in step "${currentStep}")`);
  process.exit(1);
}, TOTAL_BUDGET_MS);

let currentStep = 'start';
const failed = [];
let browser;
let page;
const problems = [];

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
    if (page) {
      const shot = path.join(ARTIFACTS, `failure-live-session-${name.replace(/[^a-z0-9]+/gi, '-')}.png`);
      await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
      console.error(`     screenshot: ${shot}; page URL: ${page.url()}`);
    }
    // The checks are independent: each failure is named, then exit 1.
    failed.push(name);
  }
}

function airlock(...args) {
  return execFileSync(AIRLOCK, args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
}

async function goto(hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForFunction((h) => location.hash.startsWith(h) && document.body.dataset.ready === 'true', hash);
}

/** The header's Mode row, found as a reader finds it: by its label. */
const modeOnPage = () => {
  const th = [...document.querySelectorAll('[data-testid=session-header] th')].find((x) => x.textContent.trim() === 'Mode');
  return th ? th.nextElementSibling.textContent.trim() : '';
};
const modeText = () => page.evaluate(modeOnPage);
const modeSays = (re) => page.waitForFunction(
  (src) => {
    const th = [...document.querySelectorAll('[data-testid=session-header] th')].find((x) => x.textContent.trim() === 'Mode');
    return th && new RegExp(src).test(th.nextElementSibling.textContent.trim());
  }, re.source, { timeout: 5000 },
).catch(async () => { throw new Failure(`the header's Mode says ${JSON.stringify(await modeText())}, not ${re}`); });

await fs.mkdir(ARTIFACTS, { recursive: true });
browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  timeout: 30_000,
});
// A laptop's width, where the sessions table has less room than a desktop's.
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
context.setDefaultTimeout(10_000);
page = await context.newPage();
page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
/** The live session's id in the record (not the one `airlock session` takes). */
let recordId;

await step('the console opens', async () => {
  const res = await page.goto(CONSOLE_URL, { waitUntil: 'domcontentloaded' });
  check(res && res.status() === 200, `the page answered ${res && res.status()}`);
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
  const row = page.locator('[data-testid=session-row]', { hasText: LIVE_NAME });
  await row.waitFor();
  recordId = await row.getAttribute('data-session');
});

await step('the search box sits above the sessions table, where a user looks first', async () => {
  const order = await page.evaluate(() => {
    const search = document.querySelector('[data-testid=search-form]');
    const table = document.querySelector('[data-testid=sessions-table]');
    return {
      before: Boolean(search.compareDocumentPosition(table) & Node.DOCUMENT_POSITION_FOLLOWING),
      searchTop: search.getBoundingClientRect().top,
      tableTop: table.getBoundingClientRect().top,
      viewport: window.innerHeight,
    };
  });
  check(order.before && order.searchTop < order.tableTop, `the search form is below the table: ${JSON.stringify(order)}`);
  check(order.searchTop < order.viewport, `the search form is off the first screen: ${JSON.stringify(order)}`);
});

await step("a live session's header counts its steps as they start", async () => {
  await goto(`#/s/${recordId}`);
  await page.locator('[data-testid=live-indicator][data-state=open]').waitFor();
  check(/^session \(1 steps?\)$/.test(await modeText()), `the header before more steps: ${await modeText()}`);
  airlock('session', 'exec', LIVE_ID, '--', 'true');
  await modeSays(/^session \(2 steps\)$/);
  airlock('session', 'exec', LIVE_ID, '--', 'sh', '-c', 'echo third');
  await modeSays(/^session \(3 steps\)$/);
  // As many as the timeline lists.
  const listed = await page.locator('[data-testid=timeline-row][data-kind=step_start]').count();
  check(listed === 3, `the timeline lists ${listed} step starts, the header says 3`);
});

await step("a stopped session's End reads `airlock session stop` as code, on one line", async () => {
  airlock('session', 'stop', LIVE_ID);
  await page.locator('[data-testid=live-ended]').waitFor({ timeout: 20_000 });
  const headerEnd = await page.innerText('[data-testid=session-end]');
  await goto('#/');
  const row = page.locator(`[data-testid=session-row][data-session="${recordId}"]`);
  await row.waitFor();
  const cell = await row.evaluate((tr) => {
    const heads = [...tr.closest('table').querySelectorAll('thead th')].map((th) => th.textContent.trim());
    const td = tr.children[heads.findIndex((t) => t.startsWith('End'))];
    // The lines its text takes: a box of text below the previous one's
    // bottom starts a new line (code and words differ a little in height).
    const boxes = [];
    const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(n);
      boxes.push(...[...range.getClientRects()].filter((r) => r.width > 0));
    }
    boxes.sort((a, b) => a.top - b.top);
    let lines = 0;
    let bottom = -Infinity;
    for (const r of boxes) {
      if (r.top >= bottom - 2) lines += 1;
      bottom = Math.max(bottom, r.bottom);
    }
    const titled = td.querySelector('[title]');
    return {
      text: td.innerText,
      code: [...td.querySelectorAll('code')].map((c) => c.textContent),
      lines,
      title: titled ? titled.getAttribute('title') : '',
    };
  });
  const wrong = [];
  if (cell.text.includes('`')) wrong.push('the End cell shows backticks');
  if (!cell.code.includes('airlock session stop')) wrong.push('the command is not shown as code');
  if (cell.lines !== 1) wrong.push(`the End cell takes ${cell.lines} lines`);
  if (!/stopped by airlock session stop/.test(cell.title)) wrong.push("the End cell's title does not hold the whole end");
  if (headerEnd.includes('`')) wrong.push(`the header's End shows backticks: ${headerEnd}`);
  check(wrong.length === 0, `${wrong.join('; ')}: ${JSON.stringify(cell)}`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'live-session-stopped.png') });
});

await step('no console error or page error happened', async () => {
  check(problems.length === 0, `the browser reported:\n       ${problems.join('\n       ')}`);
});

clearTimeout(watchdog);
await browser.close();
if (failed.length) {
  console.error(`${failed.length} check(s) failed: ${failed.join('; ')}`);
  process.exit(1);
}
console.log('all live-session browser checks passed');
process.exit(0);
