// What every browser test of the console shares: its required
// environment, its checks and steps (each failure with a screenshot), a
// watchdog over the whole run, and its exit status.

import path from 'node:path';

/** The environment variable `name`, which tests/*.rs sets; exit 2 without it. */
export function requireEnv(script, name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${script}: ${name} is not set (run it through its tests/*.rs test)`);
    process.exit(2);
  }
  return v;
}

export class Failure extends Error {}

export function check(cond, message) {
  if (!cond) throw new Failure(message);
}

/** Steps named `name` in screenshots, all within `budgetMs`. */
export function harness({ name, artifacts, budgetMs = 60_000 }) {
  let currentStep = 'start';
  let page;
  const failed = [];
  const watchdog = setTimeout(() => {
    console.error(`FAIL: the browser test ran over ${budgetMs / 1000} s (stuck in step "${currentStep}")`);
    process.exit(1);
  }, budgetMs);
  return {
    /** The page a failing step screenshots. */
    setPage(p) {
      page = p;
    },
    async step(stepName, fn) {
      currentStep = stepName;
      const t0 = Date.now();
      try {
        await fn();
        console.log(`ok   ${stepName} (${Date.now() - t0} ms)`);
      } catch (err) {
        console.error(`FAIL ${stepName}: ${err && err.message ? err.message : err}`);
        if (page) {
          const shot = path.join(artifacts, `failure-${name}-${stepName.replace(/[^a-z0-9]+/gi, '-')}.png`);
          await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
          console.error(`     screenshot: ${shot}; page URL: ${page.url()}`);
        }
        failed.push(stepName);
      }
    },
    /** Exits: 1 if any step failed, else 0 after saying `passed`. */
    finish(passed) {
      clearTimeout(watchdog);
      if (failed.length) {
        console.error(`${failed.length} check(s) failed: ${failed.join('; ')}`);
        process.exit(1);
      }
      console.log(passed);
      process.exit(0);
    },
  };
}
