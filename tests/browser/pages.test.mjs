// plegd's pages in headless Chromium, as a person sees them. Needs a plegd whose debug
// listener is at DEBUG_URL, running on `plegd sim --trouble` with a restart of plegd in
// its history (run.sh sets that up). Screenshots go to ARTIFACTS.
// Prints a PASS/FAIL line per check and "N passed, M failed"; exits 1 if any failed.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

const BASE = process.env.DEBUG_URL;
const ARTIFACTS = process.env.ARTIFACTS || 'out';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
if (!BASE) {
  console.error('DEBUG_URL is not set');
  console.log('0 passed, 1 failed');
  process.exit(1);
}
fs.mkdirSync(ARTIFACTS, { recursive: true });

const results = [];
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push(true);
    console.log(`PASS  ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    results.push(false);
    console.log(`FAIL  ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s): ${(e && e.stack) || e}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, name), fullPage: true });

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const dialogs = [];
page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));

let checkoutHref = null;
let indexerHref = null;

await check('the list shows the pods and marks the crash-looping and the OOM-killed containers', async () => {
  await page.goto(BASE + '/');
  assert((await page.locator('h1').innerText()) === 'Pods on this node', 'heading');
  // The crash loop needs three restarts (≈ 15 s of the simulator); the page follows by itself.
  const looping = page.locator('tbody.pod tr.container.crashloop[data-container="app"] .mark.crashloop');
  await looping.first().waitFor({ timeout: 60_000 });
  assert((await looping.first().innerText()) === 'crash-looping', 'the word crash-looping');
  const oom = page.locator('tbody.pod tr.container.oom[data-container="worker"] .mark.oom');
  await oom.first().waitFor({ timeout: 30_000 });
  assert((await oom.first().innerText()) === 'OOM-killed', 'the word OOM-killed');
  const text = await page.locator('main').innerText();
  for (const want of ['checkout', 'indexer', 'shop', 'batch', 'Error (exit 1)', 'OOMKilled (exit 137)']) {
    assert(text.includes(want), `the list shows ${want}`);
  }
  checkoutHref = await page.locator('td.podname a', { hasText: /^checkout$/ }).first().getAttribute('href');
  indexerHref = await page.locator('td.podname a', { hasText: /^indexer$/ }).first().getAttribute('href');
  assert(checkoutHref && checkoutHref.startsWith('/pods/'), `link to the checkout pod: ${checkoutHref}`);
  await shot(page, 'list.png');
});

await check('markup in a pod label and a container name is shown as text and never runs', async () => {
  const text = await page.locator('main').innerText();
  assert(text.includes("<script>document.title='pwned'</script>"), 'the hostile label is visible as text');
  assert(text.includes('<b>bold</b>'), 'the hostile container name is visible as text');
  assert((await page.title()) !== 'pwned', 'no injected script ran');
  assert(dialogs.length === 0, `no dialog: ${dialogs}`);
  assert((await page.locator('main b, main img').count()) === 0, 'no injected element');
});

await check('the namespace and selector filters change the list', async () => {
  await page.goto(BASE + '/');
  const all = (await page.locator('td.podname a').allInnerTexts()).length;
  await page.fill('input[name=namespace]', 'shop');
  await Promise.all([page.waitForURL(/namespace=shop/), page.click('button[type=submit]')]);
  let names = await page.locator('td.podname a').allInnerTexts();
  assert(names.includes('checkout') && !names.includes('indexer'), `namespace=shop: ${names}`);
  assert(names.length < all, `fewer pods than the whole node: ${names.length} of ${all}`);
  await page.fill('input[name=namespace]', '');
  await page.fill('input[name=selector]', 'app in (indexer,checkout),tier!=web');
  await Promise.all([page.waitForURL(/selector=/), page.click('button[type=submit]')]);
  names = await page.locator('td.podname a').allInnerTexts();
  assert(names.length === 1 && names[0] === 'indexer', `selector: ${names}`);
  await shot(page, 'list-filtered.png');
  await page.fill('input[name=selector]', 'app in (indexer');
  const [resp] = await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
  assert(resp.status() === 400, `a bad selector answers 400, not ${resp.status()}`);
  const err = await page.locator('p.error').innerText();
  assert(err.includes('invalid label selector'), `the message says what is wrong: ${err}`);
  await shot(page, 'list-bad-selector.png');
});

await check('the list sorts by restarts when its column header is clicked', async () => {
  await page.goto(BASE + '/');
  await Promise.all([page.waitForURL(/sort=restarts/), page.click('th a:text-is("Restarts")')]);
  await Promise.all([page.waitForURL(/sort=-restarts/), page.click('th a:text-is("Restarts")')]);
  const first = await page.locator('td.podname a').first().innerText();
  assert(first === 'checkout', `the crash-looping pod leads: ${first}`);
});

await check('the pod page draws one bar per attempt, the deaths, and the restart of plegd', async () => {
  await page.goto(BASE + checkoutHref);
  const bars = page.locator('svg.timeline g.attempt[data-lane="app"]');
  const n = await bars.count();
  assert(n >= 3, `at least three attempts of app drawn: ${n}`);
  const ids = await bars.evaluateAll((gs) => gs.map((g) => g.dataset.id));
  assert(new Set(ids).size === ids.length, 'one bar per container id');
  const deaths = page.locator('svg.timeline g.death[data-lane="app"]');
  assert((await deaths.count()) >= 2, 'deaths marked');
  assert((await deaths.first().locator('text').textContent()) === '1 Error', 'exit code and reason on the marker');
  const title = await bars.first().locator('title').textContent();
  for (const want of ['app attempt', 'revision', 'source', 'runtime time', 'observed', 'latency']) {
    assert(title.includes(want), `the hover title has ${want}: ${title}`);
  }
  assert((await page.locator('svg.timeline g.attempt[data-lane="proxy"]').count()) === 1, 'the proxy lane has its one attempt');
  assert((await page.locator('svg.timeline g.sandbox').count()) === 1, 'the sandbox lane');
  assert((await page.locator('svg.timeline g.plegd-start').count()) >= 1, "plegd's restart is on the axis");
  const marks = await page.locator('ul.marks').innerText();
  assert(marks.includes('plegd not running'), `the restart's window is listed: ${marks}`);
  assert((await page.locator('table.events tbody tr').count()) >= 6, 'the details table lists the events');
  await shot(page, 'timeline.png');
  // The heading and the drawing alone (the README's picture).
  const box = await page.locator('svg.timeline').boundingBox();
  await page.screenshot({ path: path.join(ARTIFACTS, 'timeline-drawing.png'), clip: { x: 0, y: 0, width: 1280, height: box.y + box.height + 12 } });
});

await check('an OOM kill is marked distinctly on its pod page', async () => {
  await page.goto(BASE + indexerHref);
  const oom = page.locator('svg.timeline g.death.oom[data-lane="worker"]');
  await oom.first().waitFor({ timeout: 10_000 });
  assert((await oom.first().locator('text').textContent()) === 'OOM 137', 'OOM marker text');
  assert((await oom.first().locator('title').textContent()).includes('OOMKilled'), 'OOM marker title');
  assert((await page.locator('table.attempts .mark.oom').count()) >= 1, 'the attempts table marks it too');
  await shot(page, 'timeline-oom.png');
});

await check('a new attempt appears on the pod page without a reload', async () => {
  await page.goto(BASE + checkoutHref);
  await page.evaluate(() => { window.__notReloaded = true; });
  const before = await page.locator('svg.timeline g.attempt[data-lane="app"]').count();
  await page.waitForFunction(
    (n) => document.querySelectorAll('svg.timeline g.attempt[data-lane="app"]').length > n, before,
    { timeout: 30_000, polling: 250 });
  assert(await page.evaluate(() => window.__notReloaded === true), 'the page was updated in place, not reloaded');
  const live = await page.locator('#live').innerText();
  assert(live.startsWith('live'), `the header says it is live: ${live}`);
  await shot(page, 'timeline-live.png');
});

await check('an unknown pod gets a page that says so, with status 404', async () => {
  const resp = await page.goto(BASE + '/pods/no-such-pod');
  assert(resp.status() === 404, `status ${resp.status()}`);
  assert((await page.locator('p.error').innerText()).includes('plegd has seen no change of a pod'), 'the sentence');
});

await check('the pages read on a narrow screen', async () => {
  const narrow = await browser.newPage({ viewport: { width: 390, height: 844 } });
  await narrow.goto(BASE + '/');
  const overflow = await narrow.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert(overflow <= 1, `the page itself does not scroll sideways (${overflow}px); tables scroll in their box`);
  await shot(narrow, 'list-narrow.png');
  await narrow.goto(BASE + checkoutHref);
  const o2 = await narrow.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert(o2 <= 1, `the pod page does not scroll sideways (${o2}px)`);
  await shot(narrow, 'timeline-narrow.png');
  await narrow.close();
});

await check('without JavaScript the pod page still shows the bars and the details', async () => {
  const nojs = await browser.newContext({ javaScriptEnabled: false });
  const p = await nojs.newPage();
  await p.goto(BASE + checkoutHref);
  assert((await p.locator('svg.timeline g.attempt[data-lane="app"]').count()) >= 3, 'bars without JS');
  assert((await p.locator('table.attempts tbody tr').count()) >= 3, 'the attempts table without JS');
  await nojs.close();
});

await check('no page raised a script error', async () => {
  assert(pageErrors.length === 0, pageErrors.join('\n'));
});

await browser.close();
const passed = results.filter(Boolean).length;
const failed = results.length - passed;
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
