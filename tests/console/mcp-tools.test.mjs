// A session's MCP tool calls in the console, in a real browser (Chromium
// through playwright-core): the "Tool calls" tab lists each call with its
// tool, arguments, verdict, rule and answer; a refused call is red with the
// reason; a tools/list answer whose tool changed is flagged loudly with the
// new description; hostile text from the server is shown as text. Driven by
// tests/console.rs, which records airlock-test-support's MCP session
// (mcp_record) plus one call with a hostile tool name, and passes:
//
//   CONSOLE_URL   the URL the console printed (with ?token=)
//   SESSION       the session's id
//   ARTIFACTS     where screenshots go
//   CHROMIUM      the browser (default /usr/bin/chromium)

import { chromium } from 'playwright-core';
import fs from 'node:fs/promises';
import path from 'node:path';

import { check, harness, requireEnv } from './harness.mjs';

const env = (name) => requireEnv('mcp-tools.test.mjs', name);

const CONSOLE_URL = env('CONSOLE_URL');
const SESSION = env('SESSION');
const ARTIFACTS = env('ARTIFACTS');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

const { step, setPage, finish } = harness({ name: 'mcp-tools', artifacts: ARTIFACTS });
const problems = [];

await fs.mkdir(ARTIFACTS, { recursive: true });
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  timeout: 30_000,
});
const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
context.setDefaultTimeout(10_000);
const page = await context.newPage();
setPage(page);
page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
// A hostile tool name carries markup: if the page ever parsed it, this runs.
await page.exposeFunction('__pwned', (what) => problems.push(`markup from the record ran: ${what}`));

/** Every row as a reader sees it. */
const rows = () => page.$$eval('[data-testid=tool-call]', (trs) => trs.map((tr) => ({
  tool: tr.dataset.tool,
  method: tr.dataset.method,
  verdict: tr.dataset.verdict,
  text: tr.innerText,
  red: tr.classList.contains('deny'),
})));

await step('the console opens and the session has a Tool calls tab', async () => {
  const res = await page.goto(CONSOLE_URL, { waitUntil: 'domcontentloaded' });
  check(res && res.status() === 200, `the page answered ${res && res.status()}`);
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
  await page.evaluate((id) => { location.hash = `#/s/${id}`; }, SESSION);
  await page.waitForFunction(() => document.body.dataset.ready === 'true' && document.body.dataset.route === 'session');
  await page.click('[data-testid=tab-tools]');
  await page.waitForFunction(() => /\/tools/.test(location.hash) && document.body.dataset.ready === 'true');
  check(await page.locator('[data-testid=tools-table]').count() === 1, 'no tool-call table');
});

await step('each call shows its tool, arguments, verdict, rule and answer; one row per message', async () => {
  const all = await rows();
  const calls = all.filter((r) => r.method === 'tools/call');
  check(calls.length === 5, `${calls.length} tools/call rows: ${JSON.stringify(all.map((r) => r.tool || r.method))}`);
  check(all.length === 8, `${all.length} rows in all`);
  const transfer = all.find((r) => r.tool === 'transfer');
  check(transfer && transfer.verdict === 'allow' && !transfer.red, `transfer: ${JSON.stringify(transfer)}`);
  check(/"amount": 5/.test(transfer.text) && /"currency": "USD"/.test(transfer.text), `transfer's arguments: ${transfer.text}`);
  check(/policy\.toml:4/.test(transfer.text) && /\bok\b/.test(transfer.text), `transfer's rule and answer: ${transfer.text}`);
  const refund = all.find((r) => r.tool === 'refund');
  check(refund && refund.verdict === 'deny' && refund.red, `refund is not red: ${JSON.stringify(refund)}`);
  check(/tool refund is not allowed on pay\.test\/mcp/.test(refund.text), `refund's reason: ${refund.text}`);
  check(/refused: not forwarded/.test(refund.text), `refund's answer: ${refund.text}`);
  const batch = all.filter((r) => /in a batch/.test(r.text)).map((r) => `${r.tool}:${r.verdict}`).sort();
  check(JSON.stringify(batch) === '["delete_all:deny","list_invoices:allow"]', `the batch's two calls: ${JSON.stringify(batch)}`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'mcp-tools.png'), fullPage: true });
});

await step('a changed tool in a tools/list answer is flagged loudly with its new description', async () => {
  const alert = await page.innerText('[data-testid=tools-changed-alert]');
  check(/Tool definitions changed during this session/.test(alert) && /transfer/.test(alert), `the alert: ${alert}`);
  const changed = page.locator('[data-testid=tool-changed]');
  check(await changed.count() === 1, `${await changed.count()} tools flagged changed`);
  const text = await changed.innerText();
  check(/CHANGED/.test(text) && /transfer/.test(text) && /read ~\/\.ssh\/id_rsa/.test(text), `the changed tool: ${text}`);
  const color = await changed.evaluate((el) => getComputedStyle(el).color);
  check(color !== 'rgb(0, 0, 0)', `the changed tool is not coloured: ${color}`);
  const lists = await page.$$eval('[data-testid=tool-list]', (els) => els.map((e) => e.innerText));
  check(lists.length === 2 && lists.every((t) => /4 tools offered/.test(t) && /hidden from the agent: delete_all/.test(t)), `the lists: ${JSON.stringify(lists)}`);
});

await step('a hostile tool name is shown as text, not markup', async () => {
  const hostile = (await rows()).find((r) => /<img/.test(r.tool));
  check(hostile, 'the hostile call is not listed');
  check(/<img src=x onerror=/.test(hostile.text), `the name is not shown as text: ${hostile.text}`);
  check(await page.locator('[data-testid=tools-table] img').count() === 0, 'an <img> element was made from the record');
  await page.waitForTimeout(200);
});

await step('no console error or page error happened, and no markup from the record ran', async () => {
  check(problems.length === 0, `the browser reported:\n       ${problems.join('\n       ')}`);
});

await browser.close();
finish('all mcp-tools browser checks passed');
