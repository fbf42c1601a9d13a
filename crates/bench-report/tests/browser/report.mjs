// Real-browser test of the HTML report (`bench report --format html`), run by run.sh, which
// makes the report and installs playwright-core next to a copy of this file.
//
//   node report.mjs --file REPORT.html [--out DIR] [--kind run|sweep]
//
// Opens the file in Debian's Chromium with every request other than the file itself refused
// (the page must be self-contained), then checks: the validity verdict is the first thing on the
// page; every chart of the report (`--kind run`: the nine of a run with scrapes; `sweep`: the
// three of a sweep) is a figure whose SVG the browser laid out, with data marks drawn inside its
// <g class="marks"> and axis text that rendered without any font file; no script error. Saves a
// full-page screenshot to DIR/report.png. Exits non-zero naming each failing chart.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const TOTAL_TIMEOUT_MS = 60_000;
const started = Date.now();

const argv = process.argv.slice(2);
function arg(name, dflt) {
  const i = argv.indexOf(name);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
}
const file = arg('--file', '');
const outDir = arg('--out', 'target/browser-report');
const kind = arg('--kind', 'run');
if (!file || !fs.existsSync(file)) {
  console.log(`FAIL no report file: --file ${file || '(missing)'}`);
  process.exit(1);
}
if (kind !== 'run' && kind !== 'sweep') {
  console.log(`FAIL --kind must be run or sweep, not ${kind}`);
  process.exit(1);
}
fs.mkdirSync(outDir, { recursive: true });
const screenshotPath = path.join(outDir, kind === 'run' ? 'report.png' : 'sweep.png');
fs.rmSync(screenshotPath, { force: true });
const fileUrl = pathToFileURL(path.resolve(file)).href;

// The least number of drawing elements (path, polyline, circle, rect, line, polygon) inside each
// chart's <g class="marks">: what the smallest real run still draws.
const CHARTS = kind === 'run'
  ? {
      ttft_cdf: 4,               // the CDF's staircase + the p50/p90/p99 dots
      e2e_cdf: 4,
      ttft_by_turn: 3,           // p90 and p50 lines + turn 0's mark
      ttft_vs_input: 5,          // a dot per turn
      throughput_over_time: 2,   // output tok/s and active sessions
      kv_usage_over_time: 1,
      queue_depth_over_time: 1,
      prefix_hit_over_time: 1,
      session_timeline: 5,       // a bar per turn
    }
  : { pareto: 2, throughput_vs_load: 1, ttft_vs_load: 2 };

let failures = 0;
let passes = 0;
function check(name, ok, detail) {
  if (ok) { passes += 1; console.log(`ok   ${name}${detail ? ` (${detail})` : ''}`); }
  else { failures += 1; console.log(`FAIL ${name}${detail ? `: ${detail}` : ''}`); }
  return ok;
}

let browser = null;
const overall = setTimeout(async () => {
  console.log(`FAIL the whole test took longer than ${TOTAL_TIMEOUT_MS / 1000} s`);
  try { if (browser) await browser.close(); } catch (_) { /* gone */ }
  process.exit(1);
}, TOTAL_TIMEOUT_MS);

try {
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, offline: true });
  const blocked = [];
  // Every request goes through here: only the report itself may load.
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url === fileUrl) return route.continue();
    blocked.push(url);
    return route.abort('blockedbyclient');
  });
  const page = await context.newPage();
  const requests = [];
  page.on('request', (r) => { if (r.url() !== fileUrl) requests.push(r.url()); });
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(`console: ${m.text()}`); });

  const response = await page.goto(fileUrl, { waitUntil: 'load', timeout: 20_000 });
  check('the report loads', response === null || response.ok(), fileUrl);
  await page.waitForTimeout(200);

  const all = [...new Set([...blocked, ...requests])];
  check('no request other than the file itself', all.length === 0,
    all.length ? `${all.length}: ${all.slice(0, 5).join(', ')}` : `${fileUrl} only`);
  check('no script error', pageErrors.length === 0, pageErrors.slice(0, 3).join(' | '));

  // The verdict first (a run's report), big: above the summary and every chart.
  if (kind === 'run') {
    const v = await page.evaluate(() => {
      const el = document.querySelector('#verdict');
      if (!el) return null;
      const r = el.getBoundingClientRect();
      const word = el.querySelector('.word');
      const below = [...document.querySelectorAll('#summary, #sessions, figure.chart, #config')]
        .map((e) => e.getBoundingClientRect().top);
      const firstSection = document.querySelector('body > section');
      return {
        top: r.top + window.scrollY,
        verdict: el.dataset.verdict,
        text: word ? word.textContent.trim() : '',
        fontPx: word ? parseFloat(getComputedStyle(word).fontSize) : 0,
        firstSection: firstSection ? firstSection.id : '',
        allBelow: below.every((t) => t > r.top),
      };
    });
    if (check('the verdict element exists', v !== null, '#verdict')) {
      check('the verdict is at the top of the page', v.top < 400 && v.firstSection === 'verdict' && v.allBelow,
        `top ${Math.round(v.top)} px, first section #${v.firstSection}`);
      check('the verdict is big and named', ['valid', 'suspect', 'invalid'].includes(v.verdict) && v.fontPx >= 24
        && v.text.toLowerCase() === v.verdict, `${v.verdict}, ${v.fontPx}px`);
    }
  }

  // Every chart: a laid-out SVG with data marks and rendered axis text.
  const charts = await page.evaluate((names) => names.map((name) => {
    const fig = document.querySelector(`figure.chart[data-chart="${name}"]`);
    if (!fig) return { name, missing: true };
    const empty = fig.querySelector('p.empty');
    const svg = fig.querySelector('svg');
    const caption = fig.querySelector('figcaption');
    if (!svg) return { name, empty: empty ? empty.textContent.trim() : '(no svg, no note)' };
    const box = svg.getBoundingClientRect();
    const marks = svg.querySelector('g.marks');
    const drawing = marks ? marks.querySelectorAll('path, polyline, circle, rect, line, polygon') : [];
    let points = 0;
    for (const el of drawing) {
      if (el.tagName === 'polyline') points += el.points.numberOfItems;
      else points += 1;
    }
    let mb = { width: 0, height: 0 };
    try { if (marks) mb = marks.getBBox(); } catch (_) { /* not rendered */ }
    const texts = [...svg.querySelectorAll('text')];
    const laidOut = texts.filter((t) => { try { return t.getBBox().width > 0; } catch (_) { return false; } });
    return {
      name,
      width: box.width,
      height: box.height,
      marks: drawing.length,
      points,
      marksBox: [mb.width, mb.height],
      texts: texts.length,
      textsLaidOut: laidOut.length,
      caption: caption ? caption.textContent.trim().length : 0,
    };
  }), Object.keys(CHARTS));

  const failing = [];
  for (const c of charts) {
    const min = CHARTS[c.name];
    let why = '';
    if (c.missing) why = 'no <figure data-chart> with this name';
    else if (c.empty !== undefined) why = `no chart, only the note "${c.empty}"`;
    else if (c.width < 200 || c.height < 150) why = `the SVG is ${Math.round(c.width)}×${Math.round(c.height)} px`;
    else if (c.marks < min) why = `${c.marks} drawing elements in its marks, expected at least ${min}`;
    else if (c.points < 2) why = `its marks have ${c.points} points`;
    else if (!(c.marksBox[0] > 0 || c.marksBox[1] > 0)) why = 'its marks have an empty bounding box';
    else if (c.texts < 4 || c.textsLaidOut < c.texts / 2) why = `${c.textsLaidOut} of ${c.texts} text labels laid out`;
    else if (c.caption < 20) why = 'no caption';
    if (!check(`chart ${c.name}`, !why, why || `${c.marks} marks, ${c.points} points, ${c.textsLaidOut} labels, ${Math.round(c.width)}×${Math.round(c.height)} px`)) {
      failing.push(c.name);
    }
  }

  await page.screenshot({ path: screenshotPath, fullPage: true, timeout: 20_000 });
  console.log(`     screenshot: ${screenshotPath}`);
  await browser.close();
  browser = null;
  clearTimeout(overall);
  if (failing.length) console.log(`failing charts: ${failing.join(', ')}`);
  console.log(`report browser test (${kind}): ${failures ? 'FAILED' : 'passed'} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  console.log(`browser: ${passes} passed, ${failures} failed`);
  process.exit(failures ? 1 : 0);
} catch (e) {
  console.log(`FAIL unexpected error: ${e && e.stack ? e.stack : e}`);
  try { if (browser) await browser.close(); } catch (_) { /* gone */ }
  process.exit(1);
}
