// Real-browser end-to-end test of the `bench serve` dashboard (run by run.sh, which starts the
// server and installs playwright-core next to a copy of this file).
//
//   node dashboard.mjs --url http://127.0.0.1:PORT [--out DIR] [--token TOKEN] [--assets DIR]
//
// --assets DIR serves index.html, app.js and style.css from DIR instead of the server's embedded
// copies (to try dashboard edits without rebuilding bench; CI leaves it off).
//
// Chromium talks to the server through a small TCP proxy in this process, so the test can cut
// every open connection mid-run: the page must see its event stream closed, reconnect (the
// browser's EventSource sends Last-Event-ID), and end with every event exactly once.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';

const TOTAL_TIMEOUT_MS = 120_000;
const started = Date.now();

// ------------------------------------------------------------------ arguments
const argv = process.argv.slice(2);
function arg(name, dflt) {
  const i = argv.indexOf(name);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
}
const serverUrl = new URL(arg('--url', process.env.BENCH_SERVE_URL || ''));
const outDir = arg('--out', 'target/browser-test');
const token = arg('--token', '');
const assetsDir = arg('--assets', '');
const screenshotPath = path.join(outDir, 'dashboard.png');
const failureShotPath = path.join(outDir, 'dashboard-failure.png');
fs.mkdirSync(outDir, { recursive: true });
fs.rmSync(screenshotPath, { force: true });
fs.rmSync(failureShotPath, { force: true });

// The workload: synthetic sessions against the embedded simulator with a fixed latency, so its
// length depends on the clock, not on the machine: 32 sessions × 5 turns at concurrency 4, each
// turn 50 ms + 31 × 10 ms = 0.36 s → 40 rounds ≈ 14.4 s.
const WORKLOAD = {
  sessions: 32, turns: 5, input: 64, output: 32, concurrency: 4, ttft: 50, itl: 10, slo: 200,
};
const PLANNED_TURNS = WORKLOAD.sessions * WORKLOAD.turns;

// ------------------------------------------------------------------ reporting
let failures = 0;
let passes = 0;
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)}s`;
function check(name, ok, detail) {
  if (ok) passes += 1;
  if (ok) console.log(`ok   ${name}${detail ? ` (${detail})` : ''}`);
  else { failures += 1; console.log(`FAIL ${name}${detail ? `: ${detail}` : ''}`); }
  return ok;
}
function info(msg) { console.log(`     ${elapsed()} ${msg}`); }

let browser = null;
let page = null;
const consoleLines = [];
const pageErrors = [];

async function screenshot(file = screenshotPath) {
  if (!page) return;
  try {
    await page.screenshot({ path: file, fullPage: true, timeout: 10_000 });
    console.log(`     screenshot: ${file}`);
  } catch (e) {
    console.log(`     (no screenshot: ${e.message.split('\n')[0]})`);
  }
}
let exiting = false;
async function fail(msg) {
  if (exiting) return;
  exiting = true;
  console.log(`FAIL ${String(msg).replace(/\x1b\[[0-9;]*m/g, '')}`);
  if (page) {
    try {
      const state = await page.evaluate(() => {
        const d = window.benchDashboard || {};
        return { ...d, eventIds: `${(d.eventIds || []).length} ids, last ${(d.eventIds || []).slice(-1)[0]}`,
          turnsDone: document.querySelector('#turns-done')?.textContent,
          conn: document.querySelector('#conn')?.textContent,
          formError: document.querySelector('#form-error')?.textContent };
      });
      console.log(`     page state: ${JSON.stringify(state)}`);
    } catch (_) { /* the page may be gone */ }
  }
  if (consoleLines.length) console.log(`     browser console (last 20):\n       ${consoleLines.slice(-20).join('\n       ')}`);
  await screenshot(failureShotPath);
  await shutdown();
  console.log(`dashboard browser test: FAILED after ${elapsed()}`);
  console.log(`browser: ${passes} passed, ${failures + 1} failed`);
  process.exit(1);
}
const overall = setTimeout(() => fail(`the whole test took longer than ${TOTAL_TIMEOUT_MS / 1000} s`), TOTAL_TIMEOUT_MS);
process.on('unhandledRejection', (e) => fail(`unexpected error: ${e && e.stack ? e.stack : e}`));

// ------------------------------------------------------------------ the proxy
const sockets = new Set();
let connections = 0;
const proxy = net.createServer((client) => {
  connections += 1;
  const upstream = net.connect(Number(serverUrl.port), serverUrl.hostname);
  sockets.add(client);
  sockets.add(upstream);
  const done = () => {
    client.destroy();
    upstream.destroy();
    sockets.delete(client);
    sockets.delete(upstream);
  };
  client.on('error', done).on('close', done);
  upstream.on('error', done).on('close', done);
  client.pipe(upstream);
  upstream.pipe(client);
});
function cutAll() {
  const n = sockets.size / 2;
  for (const s of [...sockets]) s.destroy();
  return n;
}
await new Promise((resolve, reject) => proxy.once('error', reject).listen(0, '127.0.0.1', resolve));
const proxyUrl = `http://127.0.0.1:${proxy.address().port}`;

async function shutdown() {
  clearTimeout(overall);
  try { if (browser) await browser.close(); } catch (_) { /* already gone */ }
  browser = null;
  cutAll();
  proxy.close();
}

// ------------------------------------------------------------------ direct HTTP to the server
function request(method, urlPath, { body, timeoutMs = 20_000 } = {}) {
  return new Promise((resolve, reject) => {
    const headers = { Accept: '*/*' };
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const req = http.request(new URL(urlPath, serverUrl), { method, headers }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${urlPath}: no end after ${timeoutMs} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}
function parseSse(text) {
  const events = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    let id = null;
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('id:')) id = Number(line.slice(3).trim());
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (id === null && !data.length) continue;
    let json = null;
    try { json = JSON.parse(data.join('\n')); } catch (_) { /* left null */ }
    events.push({ id, json });
  }
  return events;
}

// ------------------------------------------------------------------ the browser
const waitFor = (fn, argOrOpts, opts) => page.waitForFunction(fn, argOrOpts, opts);
const readInt = async (sel) => Number(((await page.textContent(sel)) || '').replace(/[^0-9]/g, '') || NaN);

try {
  info(`server ${serverUrl.origin}, proxy ${proxyUrl}`);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--no-first-run'],
    timeout: 60_000,
  });
  info(`chromium ${browser.version()}`);
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => { pageErrors.push(e.message); consoleLines.push(`[pageerror] ${e.message}`); });
  const external = [];
  page.on('request', (r) => { if (!r.url().startsWith(proxyUrl)) external.push(r.url()); });

  if (assetsDir) {
    const files = { '/': ['index.html', 'text/html'], '/assets/app.js': ['app.js', 'text/javascript'], '/assets/style.css': ['style.css', 'text/css'] };
    await context.route((u) => u.origin === proxyUrl && files[u.pathname], (r) => {
      const [file, type] = files[new URL(r.request().url()).pathname];
      return r.fulfill({ contentType: `${type}; charset=utf-8`, body: fs.readFileSync(path.join(assetsDir, file)) });
    });
    info(`dashboard files from ${assetsDir}`);
  }

  // 1. The dashboard loads through the proxy.
  await page.goto(`${proxyUrl}/${token ? `#token=${encodeURIComponent(token)}` : ''}`, { waitUntil: 'load' });
  await waitFor(() => window.benchDashboard && document.querySelector('#start'));
  check('the dashboard loads (index.html, app.js, style.css)', (await page.title()).includes('bench'),
    `title "${await page.title()}"`);
  const styled = await page.evaluate(() => getComputedStyle(document.querySelector('.card')).borderRadius);
  check('the stylesheet applies', styled && styled !== '0px', `card border-radius ${styled}`);

  // 2. Start a run from the form.
  await page.selectOption('#f-dataset', 'random');
  await page.fill('#f-sessions', String(WORKLOAD.sessions));
  await page.fill('#f-turns', String(WORKLOAD.turns));
  await page.fill('#f-input', String(WORKLOAD.input));
  await page.fill('#f-output', String(WORKLOAD.output));
  await page.fill('#f-concurrency', String(WORKLOAD.concurrency));
  await page.selectOption('#f-latency', 'fixed');
  await page.fill('#f-ttft', String(WORKLOAD.ttft));
  await page.fill('#f-itl', String(WORKLOAD.itl));
  await page.fill('#f-slo', String(WORKLOAD.slo));
  const runStart = Date.now();
  await page.click('#start');
  await waitFor(() => window.benchDashboard.runId || !document.querySelector('#form-error').hidden);
  const formError = await page.evaluate(() => {
    const e = document.querySelector('#form-error');
    return e.hidden ? null : e.textContent;
  });
  if (!check('POST /api/runs from the form starts a run', !formError, formError || undefined)) await fail('no run started');
  const runId = await page.evaluate(() => window.benchDashboard.runId);
  info(`run ${runId}`);

  // 3. Progress numbers change while it runs.
  await waitFor(() => window.benchDashboard.status === 'running', null, { timeout: 30_000 });
  check('the status turns running', true);
  await waitFor(() => Number(document.querySelector('#turns-done').textContent.replace(/\D/g, '')) > 0, null, { timeout: 20_000 });
  const firstRead = await readInt('#turns-done');
  await waitFor((prev) => Number(document.querySelector('#turns-done').textContent.replace(/\D/g, '')) > prev, firstRead, { timeout: 20_000 });
  const secondRead = await readInt('#turns-done');
  const planned = await readInt('#turns-planned');
  check('turns done increases between two reads', secondRead > firstRead, `${firstRead} then ${secondRead} of ${planned}`);

  // 4. Cut every connection mid-run.
  const before = await page.evaluate(() => ({ ...window.benchDashboard, eventIds: window.benchDashboard.eventIds.length }));
  if (!check('the run is still going when the connections are cut', before.status === 'running', `status ${before.status}, ${before.eventIds} events so far`)) await fail('the run ended too soon to test a reconnect');
  const cut = cutAll();
  info(`cut ${cut} proxied connection(s) after event ${before.lastId}`);
  check('the event stream was open through the proxy', cut >= 1, `${cut} connection(s) cut`);

  await waitFor(() => window.benchDashboard.reconnects >= 1, null, { timeout: 30_000 });
  const after = await page.evaluate(() => ({ errors: window.benchDashboard.errors, reconnects: window.benchDashboard.reconnects, status: window.benchDashboard.status }));
  check('the page saw the stream drop and reconnected', after.errors >= 1 && after.reconnects >= 1,
    `${after.errors} error(s), ${after.reconnects} reconnect(s), status ${after.status}`);

  // 5. The run ends; the page shows the summary.
  await waitFor(() => window.benchDashboard.status !== 'running' && window.benchDashboard.status !== 'starting'
    && !document.querySelector('#summary').hidden, null, { timeout: 90_000 });
  const runSeconds = (Date.now() - runStart) / 1000;
  const dash = await page.evaluate(() => JSON.parse(JSON.stringify(window.benchDashboard)));
  check('the run ends completed', dash.status === 'completed', `status ${dash.status} after ${runSeconds.toFixed(1)} s`);
  check('the event stream is closed after the terminal event', dash.connection === 'ended', `connection "${dash.connection}"`);

  // 6. The ids the page processed are the server's, once each, 1..N.
  const stream = await request('GET', `/api/runs/${encodeURIComponent(runId)}/events`);
  check('GET /api/runs/{id}/events replays a finished run as text/event-stream', stream.status === 200
    && String(stream.headers['content-type']).startsWith('text/event-stream'), `${stream.status} ${stream.headers['content-type']}`);
  const serverEvents = parseSse(stream.body).filter((e) => e.id !== null);
  const serverIds = serverEvents.map((e) => e.id);
  const last = serverEvents[serverEvents.length - 1];
  const N = last ? last.id : 0;
  check('the server stream ends with a terminal event', last && last.json && ['run.completed', 'run.failed', 'run.cancelled'].includes(last.json.event),
    last && last.json ? `${last.json.event} #${N}` : 'no event');
  const pageIds = dash.eventIds;
  const firstBad = pageIds.findIndex((id, i) => id !== i + 1);
  check('the page processed ids 1..N with no gap and no duplicate', pageIds.length === N && firstBad === -1 && dash.gaps === 0,
    firstBad === -1 ? `N = ${N}, ${pageIds.length} processed` : `position ${firstBad}: id ${pageIds[firstBad]}; ${pageIds.length} processed, N = ${N}`);
  check('the page processed exactly the server\'s ids', JSON.stringify(pageIds) === JSON.stringify(serverIds),
    `page ${pageIds.length}, server ${serverIds.length}`);
  check('every event received was processed once or skipped as a duplicate', dash.received === pageIds.length + dash.duplicates,
    `${dash.received} received = ${pageIds.length} processed + ${dash.duplicates} duplicate(s)`);
  check('the page showed "reconnecting…" while the stream was down', dash.connectionHistory.includes('reconnecting…'),
    dash.connectionHistory.join(' → '));
  check('events after the cut were processed', N > before.lastId, `cut after #${before.lastId}, last #${N}`);

  // 7. Charts, turns table, summary.
  for (const name of ['tokps', 'ttft', 'active']) {
    const marks = await page.locator(`svg[data-chart="${name}"] .mark`).count();
    check(`chart "${name}" drew marks`, marks > 0, `${marks} mark(s)`);
  }
  const turnRows = await page.locator('#turns-body tr').count();
  check('the recent-turns table has rows', turnRows > 0, `${turnRows} row(s)`);
  const run = JSON.parse((await request('GET', `/api/runs/${encodeURIComponent(runId)}`)).body);
  const summaryTurns = await readInt('#summary-turns');
  check('the summary shows the number of turns', summaryTurns === run.summary?.turns_total && summaryTurns === PLANNED_TURNS,
    `page ${summaryTurns}, server ${run.summary?.turns_total}, planned ${PLANNED_TURNS}`);
  const validity = (await page.textContent('#summary-validity')).trim();
  const validityReason = (await page.textContent('#summary-validity-reason')).trim();
  check('the summary shows the run\'s validity verdict and its reason',
    ['valid', 'suspect', 'invalid'].includes(validity) && validity === run.summary?.validity
      && validityReason.startsWith(`${validity}: `) && validityReason === run.summary?.validity_reason,
    `page ${validity} (${validityReason}), server ${run.summary?.validity}`);
  const grades = await page.$$eval('#grades-body tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent.trim()).join(' · ')));
  check('the summary has the SLO grader\'s row', grades.some((t) => t.includes('slo')), grades.join(' | ') || 'no grader row');
  await page.waitForSelector(`.run-item[data-run="${runId}"] .badge[data-status="completed"]`, { timeout: 15_000 }).catch(() => null);
  const listed = await page.locator(`.run-item[data-run="${runId}"]`).count();
  check('the runs list has the run', listed === 1);
  check('no uncaught error in the page', pageErrors.length === 0, pageErrors.join('; ') || undefined);
  check('the page fetched nothing from elsewhere', external.length === 0, external.join(', ') || undefined);
  await screenshot();

  // 8. A bad spec shows the server's 400 message.
  await page.click('#advanced summary');
  await page.fill('#f-spec', '{"lod": {}}');
  await page.click('#start');
  await page.waitForSelector('#form-error:not([hidden])', { timeout: 10_000 });
  const badText = await page.textContent('#form-error');
  check('a bad spec shows the 400 error', /400/.test(badText) && /lod/.test(badText), badText.trim());
  await page.fill('#f-spec', '');

  // 9. Browsing: a reload, then a click on the run replays its history to the end.
  await page.goto(`${proxyUrl}/`, { waitUntil: 'load' });
  await page.click(`.run-item[data-run="${runId}"]`);
  await waitFor((n) => window.benchDashboard.eventIds.length >= n && window.benchDashboard.connection === 'ended', N, { timeout: 30_000 });
  const replay = await page.evaluate(() => ({ ids: window.benchDashboard.eventIds, status: window.benchDashboard.status }));
  check('a past run replays ids 1..N and shows completed', replay.status === 'completed'
    && JSON.stringify(replay.ids) === JSON.stringify(serverIds), `${replay.ids.length} ids, status ${replay.status}`);
  check('the replayed summary is shown', (await readInt('#summary-turns')) === PLANNED_TURNS);
  info(`run took ${runSeconds.toFixed(1)} s; ${connections} proxied connection(s) in all`);
} catch (e) {
  await fail(e && e.message ? e.message.split('\n').slice(0, 6).join('\n     ') : String(e));
}

if (failures) await screenshot(failureShotPath);
await shutdown();
if (failures) {
  console.log(`dashboard browser test: ${failures} check(s) FAILED after ${elapsed()}`);
  console.log(`browser: ${passes} passed, ${failures} failed`);
  process.exit(1);
}
console.log(`dashboard browser test: all checks passed in ${elapsed()}`);
console.log(`browser: ${passes} passed, 0 failed`);
process.exit(0);
