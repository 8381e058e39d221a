// Drives Debian's chromium through playwright-core over the console's pages and prints one JSON
// report: per page, its status, every request the browser made, the figures it shows
// ([data-figure]), the why timeline's event types, axe-core's violations, where the keyboard
// focus goes on Tab, whether the figures are there without JavaScript, and its screenshot.
// Usage: node console.cjs CONFIG.json  (CONFIG: {base, pages: [{name, path, select?, click?}],
// out, modules, chromium}). No assertion here: the Python test asserts on the report.
'use strict';
const fs = require('fs');
const path = require('path');

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const { chromium } = require(path.join(config.modules, 'playwright-core'));
const AXE = path.join(config.modules, 'axe-core', 'axe.min.js');
const TIMEOUT_MS = 60000;

async function figures(page) {
  return page.$$eval('[data-figure]', (nodes) => Object.fromEntries(nodes.map((n) => [
    n.getAttribute('data-figure'),
    { text: n.textContent.trim(), value: n.getAttribute('data-value') },
  ])));
}

// A form filled and submitted the way a person would (spec.select: [selector, value], then
// spec.click): the page it leads to is the one reported. Returns that page's response.
async function act(page, spec) {
  if (spec.select) await page.selectOption(spec.select[0], spec.select[1], { timeout: TIMEOUT_MS });
  if (!spec.click) return null;
  const [response] = await Promise.all([
    page.waitForNavigation({ waitUntil: 'load', timeout: TIMEOUT_MS }),
    page.click(spec.click, { timeout: TIMEOUT_MS }),
  ]);
  return response;
}

async function visit(browser, spec) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const requests = [];
  context.on('request', (r) => requests.push(r.url()));
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT_MS);
  let response = await page.goto(config.base + spec.path, { waitUntil: 'load' });
  response = await act(page, spec) || response;
  const report = {
    status: response.status(), url: page.url(), requests, figures: await figures(page),
  };
  report.why = await page.$$eval('ol.timeline li', (items) => items.map((li) => ({
    event_type: li.getAttribute('data-event-type'),
    sentence: li.querySelector('p').textContent.trim(),
    link: li.querySelector('a').getAttribute('href'),
  })));
  report.title = await page.title();
  report.screenshot = path.join(config.out, `${spec.name}.png`);
  await page.screenshot({ path: report.screenshot, fullPage: true });
  // Keyboard: where focus goes on the first few Tabs.
  report.focus = [];
  for (let n = 0; n < 4; n += 1) {
    await page.keyboard.press('Tab');
    report.focus.push(await page.evaluate(() => {
      const a = document.activeElement;
      return a ? `${a.tagName.toLowerCase()} ${a.textContent.trim().slice(0, 40)}` : null;
    }));
  }
  // axe-core's source is added to the page as an inline script (no request).
  await page.addScriptTag({ content: fs.readFileSync(AXE, 'utf8') });
  const axe = await page.evaluate(() => window.axe.run(document, {
    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] },
  }));
  report.violations = axe.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')),
  }));
  report.passes = axe.passes.length;
  await context.close();
  // The same page with JavaScript off: the figures are drawn by the server.
  const bare = await browser.newContext({ javaScriptEnabled: false });
  const barePage = await bare.newPage();
  await barePage.goto(config.base + spec.path, { waitUntil: 'load', timeout: TIMEOUT_MS });
  const bareResponse = await act(barePage, spec);
  report.status_without_js = bareResponse ? bareResponse.status() : null;
  report.url_without_js = barePage.url();
  report.figures_without_js = await barePage.locator('[data-figure]').count();
  await bare.close();
  return report;
}

(async () => {
  const browser = await chromium.launch({
    executablePath: config.chromium,
    // As root in CI the sandbox cannot start; the browser only ever loads this process's pages.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    timeout: TIMEOUT_MS,
  });
  const out = { browser: browser.version(), pages: {} };
  try {
    for (const spec of config.pages) out.pages[spec.name] = await visit(browser, spec);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})().catch((error) => { process.stderr.write(`${error.stack || error}\n`); process.exit(1); });
