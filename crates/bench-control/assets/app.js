// The `bench serve` dashboard (docs/serve.md): start a run, watch its event stream, browse past runs.
// Plain JS, no library, no network asset: charts are inline SVG drawn below.
'use strict';
(function () {
  const $ = (sel) => document.querySelector(sel);
  const TOKEN_KEY = 'bench.token';
  const TERMINAL = new Set(['run.completed', 'run.failed', 'run.cancelled']);
  const ENDED = new Set(['completed', 'failed', 'cancelled', 'unfinished']);
  const MAX_TURN_ROWS = 50;
  const MAX_LOG_ROWS = 200;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // ---------------------------------------------------------------- state for tests and the UI
  const dash = {
    runId: null,
    eventIds: [], // ids processed, in order
    received: 0, // events with an id received (processed + duplicates)
    duplicates: 0, // events received again (id <= last processed) and skipped
    reconnects: 0, // error → reopen cycles of the event stream
    errors: 0, // onerror calls
    gaps: 0, // times an id arrived that was not last + 1
    lagged: 0, // stream.lagged notices
    status: 'none',
    connection: 'idle',
    connectionHistory: [], // the connection states shown, in order (repeats folded)
    lastId: 0,
  };
  window.benchDashboard = dash;

  // ---------------------------------------------------------------- formatting
  function fmtNum(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    if (typeof v !== 'number') return String(v);
    const d = digits !== undefined ? digits : Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
    return v.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
  }
  const fmtInt = (v) => (v === null || v === undefined ? '–' : Number(v).toLocaleString('en-US', { maximumFractionDigits: 0 }));
  function fmtDur(s) {
    if (s === null || s === undefined || Number.isNaN(s)) return '–';
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60);
    const sec = Math.floor(s % 60);
    if (m < 60) return `${m} min ${String(sec).padStart(2, '0')} s`;
    return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
  }
  function fmtTime(utc) {
    if (!utc) return '–';
    const d = new Date(utc);
    if (Number.isNaN(d.getTime())) return utc;
    return d.toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const setText = (sel, v) => { const e = $(sel); if (e) e.textContent = v; };

  // ---------------------------------------------------------------- token and API
  function readTokenFromHash() {
    const h = location.hash.replace(/^#/, '');
    if (!h) return;
    const params = new URLSearchParams(h);
    const t = params.get('token');
    if (t !== null) {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
      params.delete('token');
      const rest = params.toString();
      // Keep the token out of the address bar (and of bookmarks and screenshots).
      history.replaceState(null, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
    }
  }
  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  class ApiError extends Error {
    constructor(status, message, body) { super(message); this.status = status; this.body = body; }
  }

  async function api(path, opts = {}) {
    const headers = Object.assign({ Accept: 'application/json' }, opts.headers || {});
    if (token()) headers.Authorization = `Bearer ${token()}`;
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body, cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, `cannot reach the server (${e.message})`, null);
    }
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
    if (res.status === 401) showTokenForm(body && body.error);
    if (!res.ok) {
      const msg = (body && body.error) || text.trim() || `${res.status} ${res.statusText}`;
      throw new ApiError(res.status, msg, body);
    }
    return body;
  }

  function showTokenForm(why) {
    const f = $('#token-form');
    f.hidden = false;
    setText('#token-note', why ? `401: ${why}` : 'The server answered 401: it needs a token.');
    if (document.activeElement === document.body) $('#token-input').focus();
  }

  // ---------------------------------------------------------------- charts (inline SVG)
  class Chart {
    constructor(svg, series, opts) {
      this.svg = svg;
      this.series = series; // [{key, label}]
      this.points = series.map(() => []); // per series: [[x, y]]
      this.opts = opts || {};
      this.dirty = true;
      if (typeof ResizeObserver === 'function') new ResizeObserver(() => { this.dirty = true; schedule(); }).observe(svg);
    }
    clear() { this.points = this.series.map(() => []); this.dirty = true; }
    push(x, values) {
      values.forEach((v, i) => { if (typeof v === 'number' && Number.isFinite(v)) this.points[i].push([x, v]); });
      this.dirty = true;
    }
    draw() {
      if (!this.dirty) return;
      this.dirty = false;
      const svg = this.svg;
      const W = Math.max(200, Math.round(svg.clientWidth || 400));
      const H = Math.max(120, Math.round(svg.clientHeight || 180));
      svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
      while (svg.firstChild) svg.firstChild.remove();
      const m = { l: 48, r: 12, t: 10, b: 24 };
      const all = this.points.flat();
      const mk = (tag, attrs) => { const e = document.createElementNS(SVG_NS, tag); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v); svg.append(e); return e; };
      if (!all.length) {
        const t = mk('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' });
        t.textContent = 'no data';
        return;
      }
      let x0 = Math.min(...all.map((p) => p[0]));
      let x1 = Math.max(...all.map((p) => p[0]));
      if (x1 - x0 < 1e-9) { x1 = x0 + 1; }
      x0 = Math.min(x0, 0);
      const yMax = niceCeil(Math.max(...all.map((p) => p[1])) || 1);
      const sx = (x) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
      const sy = (y) => H - m.b - (y / yMax) * (H - m.t - m.b);
      // Grid and axes.
      for (let i = 0; i <= 4; i++) {
        const v = (yMax * i) / 4;
        const y = sy(v);
        mk('line', { x1: m.l, x2: W - m.r, y1: y, y2: y, class: i === 0 ? 'axis' : 'grid' });
        const t = mk('text', { x: m.l - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' });
        t.textContent = shortNum(v);
      }
      const xstep = niceStep((x1 - x0) / Math.max(2, Math.floor((W - m.l - m.r) / 55)));
      for (let v = Math.ceil(x0 / xstep) * xstep; v <= x1 + 1e-9; v += xstep) {
        const t = mk('text', { x: sx(v), y: H - 6, 'text-anchor': v === x0 ? 'start' : 'middle', class: 'tick' });
        t.textContent = `${shortNum(v)} s`;
      }
      // Lines (downsampled to about one point per 2 px) and the last point of each.
      this.points.forEach((pts, i) => {
        if (!pts.length) return;
        const step = Math.max(1, Math.floor(pts.length / ((W - m.l - m.r) / 2)));
        const d = [];
        for (let j = 0; j < pts.length; j += step) d.push(pts[j]);
        if (d[d.length - 1] !== pts[pts.length - 1]) d.push(pts[pts.length - 1]);
        mk('path', {
          d: d.map((p, j) => `${j ? 'L' : 'M'}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(''),
          class: `mark line s${i}`,
        });
        const last = pts[pts.length - 1];
        const c = mk('circle', { cx: sx(last[0]).toFixed(1), cy: sy(last[1]).toFixed(1), r: 3, class: `mark dot s${i}` });
        const title = document.createElementNS(SVG_NS, 'title');
        title.textContent = `${this.series[i].label}: ${fmtNum(last[1])} at ${fmtNum(last[0], 1)} s`;
        c.append(title);
      });
    }
  }
  function niceCeil(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const k of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (k * p >= v) return k * p;
    return 10 * p;
  }
  function niceStep(raw) {
    if (!(raw > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const k of [1, 2, 2.5, 5, 10]) if (k * p >= raw) return k * p;
    return 10 * p;
  }
  function shortNum(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
    if (a >= 1e4) return `${+(v / 1e3).toFixed(1)}k`;
    if (a >= 100 || a === 0) return String(Math.round(v));
    return String(+v.toFixed(a >= 10 ? 1 : 2));
  }

  const charts = {};
  function initCharts() {
    charts.tokps = new Chart($('svg[data-chart="tokps"]'), [{ key: 'output_tok_s', label: 'output tok/s' }]);
    charts.ttft = new Chart($('svg[data-chart="ttft"]'), [{ key: 'ttft_p50_ms', label: 'TTFT p50 ms' }, { key: 'ttft_p99_ms', label: 'TTFT p99 ms' }]);
    charts.active = new Chart($('svg[data-chart="active"]'), [{ key: 'active', label: 'active sessions' }]);
  }

  // ---------------------------------------------------------------- batched rendering
  let frame = 0;
  const pending = { progress: null, turns: [], log: [] };
  function schedule() {
    if (frame) return;
    frame = requestAnimationFrame(render);
  }
  function render() {
    frame = 0;
    if (pending.progress) { renderProgress(pending.progress); pending.progress = null; }
    if (pending.turns.length) { renderTurns(pending.turns.splice(0)); }
    if (pending.log.length) { renderLog(pending.log.splice(0)); }
    for (const c of Object.values(charts)) c.draw();
    setText('#events-count', fmtInt(dash.eventIds.length));
  }

  function renderProgress(p) {
    setText('#turns-done', fmtInt(p.turns_done));
    setText('#turns-planned', p.turns_planned === null || p.turns_planned === undefined ? '?' : fmtInt(p.turns_planned));
    setText('#turns-failed', fmtInt(p.turns_failed));
    $('#turns-failed').classList.toggle('bad', (p.turns_failed || 0) > 0);
    setText('#active', fmtInt(p.active));
    setText('#concurrency', p.concurrency ? fmtInt(p.concurrency) : '∞');
    setText('#tokps', fmtNum(p.output_tok_s, 1));
    setText('#ttft-p50', fmtNum(p.ttft_p50_ms, 1));
    setText('#ttft-p99', fmtNum(p.ttft_p99_ms, 1));
    setText('#elapsed', fmtDur(p.elapsed_s) + (p.warmup ? ' (warm-up)' : ''));
    const frac = typeof p.fraction === 'number' ? p.fraction : p.turns_planned ? p.turns_done / p.turns_planned : null;
    $('#progress-fill').style.width = frac === null ? '0' : `${Math.max(0, Math.min(1, frac)) * 100}%`;
    setText('#turns-skipped', p.turn_events_skipped ? `${fmtInt(p.turn_events_skipped)} turns not streamed (over 20/s)` : '');
    const errs = p.errors_by_kind && Object.entries(p.errors_by_kind);
    $('#turns-failed').title = errs && errs.length ? errs.map(([k, n]) => `${k}: ${n}`).join(', ') : '';
  }

  function gradeCell(grades) {
    const td = el('td', { class: 'grades' });
    for (const g of grades || []) {
      const cls = /^(pass|ok|match|yes)$/i.test(g.label) ? 'good' : /^(fail|miss|no|mismatch)$/i.test(g.label) ? 'bad' : '';
      td.append(el('span', { class: `pill ${cls}`, title: g.notes || '', text: `${g.grader}: ${g.label} (${fmtNum(g.score, 2)})` }));
    }
    return td;
  }
  function renderTurns(turns) {
    const body = $('#turns-body');
    const rows = turns.slice(-MAX_TURN_ROWS).reverse().map((t) => el('tr', { class: t.status === 'ok' ? '' : 'row-bad' },
      el('td', { text: t.session_id + (t.replay ? ` #${t.replay}` : '') + (t.warmup ? ' (warm-up)' : '') }),
      el('td', { class: 'num', text: fmtInt(t.turn_index) }),
      el('td', { text: t.status + (t.error_kind ? ` (${t.error_kind})` : '') }),
      el('td', { class: 'num', text: t.ttft_ms === null || t.ttft_ms === undefined ? '–' : `${fmtNum(t.ttft_ms, 1)} ms` }),
      el('td', { class: 'num', text: t.tpot_ms === null || t.tpot_ms === undefined ? '–' : `${fmtNum(t.tpot_ms, 2)} ms` }),
      el('td', { class: 'num', text: t.e2e_ms === null || t.e2e_ms === undefined ? '–' : `${fmtNum(t.e2e_ms, 0)} ms` }),
      el('td', { class: 'num', text: `${fmtInt(t.input_tokens)} / ${fmtInt(t.output_tokens)}` }),
      gradeCell(t.grades)));
    body.prepend(...rows);
    while (body.rows.length > MAX_TURN_ROWS) body.lastElementChild.remove();
    $('#turns-empty').hidden = body.rows.length > 0;
  }

  function describe(e) {
    switch (e.event) {
      case 'run.created': return `created (${e.kind || 'replay'})`;
      case 'run.started': {
        const parts = [];
        if (e.sessions_planned !== null && e.sessions_planned !== undefined) parts.push(`${fmtInt(e.sessions_planned)} sessions`);
        if (e.turns_planned !== null && e.turns_planned !== undefined) parts.push(`${fmtInt(e.turns_planned)} turns planned`);
        if (e.concurrency) parts.push(`concurrency ${e.concurrency}`);
        if (e.rate) parts.push(`${e.rate} sessions/s`);
        return `started${parts.length ? `: ${parts.join(', ')}` : ''}`;
      }
      case 'run.resumed': return 'resumed';
      case 'phase': return `phase: ${e.phase}`;
      case 'scrape.disabled': return `metrics scraping disabled: ${e.reason}`;
      case 'run.stopped': return `stopped by ${typeof e.by === 'object' ? JSON.stringify(e.by) : e.by}${e.reason ? `: ${e.reason}` : ''}`;
      case 'run.completed': return 'completed';
      case 'run.failed': return e.status === 'unfinished' ? 'unfinished: no recorded end (it crashed, or another process runs it)' : `failed${e.error ? `: ${e.error}` : ''}`;
      case 'run.cancelled': return 'cancelled';
      case 'notice': return `${e.level && e.level !== 'info' ? `${e.level}: ` : ''}${e.message || ''}`;
      case 'stream.lagged': return `fell behind: events ${e.missed_from}–${e.missed_to} are no longer kept`;
      case 'sweep.point_started': return `sweep point ${e.point} (level ${e.level}) started`;
      case 'sweep.point': {
        const p = e.point || {};
        const ttft = p.ttft_p50_ms === null || p.ttft_p50_ms === undefined ? '' : `, TTFT p50 ${p.ttft_p50_ms.toFixed(1)} ms`;
        return `sweep point ${p.run_dir} done: ${p.verdict}, ${fmtInt(p.turns_ok)} turns ok${ttft}`;
      }
      default: return e.event;
    }
  }
  function renderLog(items) {
    const log = $('#log');
    for (const e of items) {
      const d = e.utc ? new Date(e.utc) : null;
      const when = d && !Number.isNaN(d.getTime()) ? d.toLocaleTimeString() : '';
      log.append(el('li', { class: TERMINAL.has(e.event) ? 'log-end' : '' }, el('span', { class: 'muted', text: `${when} #${e.id ?? '–'} ` }), describe(e)));
    }
    while (log.children.length > MAX_LOG_ROWS) log.firstElementChild.remove();
  }

  // ---------------------------------------------------------------- status and summary
  function setStatus(s) {
    dash.status = s;
    const b = $('#status');
    b.textContent = s;
    b.dataset.status = s;
    $('#cancel').hidden = !(dash.runId && (s === 'running' || s === 'starting'));
  }
  // Replay charts and the turns table are hidden for a journeys suite (it has neither).
  function setKind(kind) { $('main').dataset.kind = kind || 'replay'; }
  function setConn(s) {
    dash.connection = s;
    const h = dash.connectionHistory;
    if (h[h.length - 1] !== s) { h.push(s); if (h.length > 100) h.shift(); }
    const c = $('#conn');
    c.textContent = s;
    c.dataset.state = s.replace(/[^a-z]/g, '');
  }
  function notice(msg) {
    const n = $('#run-notice');
    n.textContent = msg || '';
    n.hidden = !msg;
  }

  function showSummary(s) {
    if (!s) return;
    $('#summary').hidden = false;
    setText('#summary-turns', fmtInt(s.turns_total));
    setText('#summary-failed', fmtInt(s.turns_failed));
    $('#summary-failed').classList.toggle('bad', (s.turns_failed || 0) > 0);
    setText('#summary-duration', fmtDur(s.duration_s));
    setText('#summary-tokps', fmtNum(s.output_tok_s, 1));
    setText('#summary-ttft-p50', fmtNum(s.ttft_p50_ms, 1));
    setText('#summary-ttft-p99', fmtNum(s.ttft_p99_ms, 1));
    setText('#summary-tpot-p50', fmtNum(s.tpot_p50_ms, 2));
    setText('#summary-e2e-p50', fmtNum(s.e2e_p50_ms, 0));
    const g = $('#summary-gate');
    if (s.passed === true) { g.textContent = 'passed'; g.dataset.status = 'completed'; }
    else if (s.passed === false) { g.textContent = 'not passed'; g.dataset.status = 'failed'; }
    else { g.textContent = ''; delete g.dataset.status; }
    const v = $('#summary-validity');
    const vs = { valid: 'completed', suspect: 'cancelled', invalid: 'failed' };
    if (s.validity) { v.textContent = s.validity; v.dataset.status = vs[s.validity] || ''; }
    else { v.textContent = ''; delete v.dataset.status; }
    setText('#summary-validity-reason', s.validity_reason || '');
    const stop = [];
    if (s.stopped_by) stop.push(`Stopped by ${typeof s.stopped_by === 'object' ? JSON.stringify(s.stopped_by) : s.stopped_by}${s.reason ? `: ${s.reason}` : ''}.`);
    if (s.failed_because) stop.push(`Not passed: ${s.failed_because}.`);
    setText('#summary-stop', stop.join(' '));
    const grades = Array.isArray(s.grades) ? s.grades : [];
    $('#grades-wrap').hidden = grades.length === 0;
    const gb = $('#grades-body');
    gb.replaceChildren(...grades.map((g) => el('tr', null,
      el('td', { text: g.grader }),
      el('td', { class: 'num', text: fmtInt(g.graded) }),
      el('td', { class: 'num', text: fmtNum(g.mean_score, 3) }),
      el('td', { text: Object.entries(g.labels || {}).map(([k, n]) => `${k}: ${n}`).join(', ') || '–' }),
      el('td', { class: 'num', title: g.first_error || '', text: fmtInt(g.errors || 0) + (g.first_error ? ` (${g.first_error})` : '') }))));
  }
  // The last progress event may predate the last turns: at the end the counters come from the summary.
  function finalNumbers(s, completed) {
    if (!s) return;
    if (pending.progress) { renderProgress(pending.progress); pending.progress = null; }
    if (typeof s.turns_total === 'number') setText('#turns-done', fmtInt(s.turns_total));
    if (typeof s.turns_failed === 'number') setText('#turns-failed', fmtInt(s.turns_failed));
    setText('#active', '0');
    if (typeof s.duration_s === 'number') setText('#elapsed', fmtDur(s.duration_s));
    if (completed) $('#progress-fill').style.width = '100%';
  }
  function hideSummary() { $('#summary').hidden = true; }

  // ---------------------------------------------------------------- the event stream
  let es = null; // the current EventSource
  let reopenTimer = 0;
  let hadError = false; // an error happened since the last open (the next open is a reconnect)
  let terminalSeen = false;
  let backoff = 1000;
  let lastIdAtOpen = 0; // dash.lastId when the current stream was opened
  let lastProgressed = true; // the stream that just failed had brought new events

  function resetRunView(id) {
    dash.runId = id;
    dash.eventIds = [];
    dash.received = 0;
    dash.duplicates = 0;
    dash.connectionHistory = [];
    dash.reconnects = 0;
    dash.errors = 0;
    dash.gaps = 0;
    dash.lagged = 0;
    dash.lastId = 0;
    seen.clear();
    terminalSeen = false;
    hadError = false;
    lastProgressed = true;
    backoff = 1000;
    for (const c of Object.values(charts)) c.clear();
    pending.progress = null; pending.turns = []; pending.log = [];
    $('#turns-body').replaceChildren();
    $('#turns-empty').hidden = false;
    $('#journeys-body').replaceChildren();
    $('#journeys').hidden = true;
    $('#log').replaceChildren();
    for (const s of ['#turns-done', '#turns-failed', '#active']) setText(s, '0');
    for (const s of ['#tokps', '#ttft-p50', '#ttft-p99', '#elapsed']) setText(s, '–');
    setText('#turns-planned', '?');
    setText('#concurrency', '?');
    setText('#turns-skipped', '');
    $('#progress-fill').style.width = '0';
    setText('#run-id', id);
    setText('#run-meta', '');
    setKind('replay');
    notice('');
    hideSummary();
    schedule();
  }
  const seen = new Set();

  function closeStream() {
    clearTimeout(reopenTimer);
    reopenTimer = 0;
    if (es) { es.onopen = es.onmessage = es.onerror = null; es.close(); es = null; }
  }

  function streamUrl(id, after) {
    const q = new URLSearchParams();
    if (token()) q.set('access_token', token());
    if (after) q.set('last_event_id', String(after));
    const qs = q.toString();
    return `/api/runs/${encodeURIComponent(id)}/events${qs ? `?${qs}` : ''}`;
  }

  function openStream(id, after) {
    closeStream();
    const src = new EventSource(streamUrl(id, after));
    es = src;
    lastIdAtOpen = dash.lastId;
    setConn(hadError ? 'reconnecting…' : 'connecting…');
    src.onopen = () => {
      if (es !== src) return;
      if (hadError) { dash.reconnects += 1; hadError = false; }
      backoff = 1000;
      setConn('live');
      notice('');
    };
    src.onmessage = (m) => { if (es === src) onMessage(m); };
    src.onerror = () => {
      if (es !== src || terminalSeen) return;
      dash.errors += 1;
      hadError = true;
      if (dash.status === 'unfinished' && dash.lastId === lastIdAtOpen) {
        closeStream(); // a run with no recorded end: its replayed stream has ended
        setConn('ended');
        return;
      }
      lastProgressed = dash.lastId !== lastIdAtOpen;
      lastIdAtOpen = dash.lastId;
      if (src.readyState === EventSource.CLOSED) {
        // The browser gave up (an HTTP error, a 204, a wrong content type): reopen by hand after
        // checking the run, resuming after the last event processed.
        src.onopen = src.onmessage = src.onerror = null;
        src.close();
        es = null;
        setConn('reconnecting…');
        reopenTimer = setTimeout(() => recover(id), backoff);
        backoff = Math.min(backoff * 2, 15000);
      } else {
        setConn('reconnecting…'); // EventSource retries by itself, sending Last-Event-ID
      }
    };
  }

  async function recover(id) {
    reopenTimer = 0;
    if (dash.runId !== id || terminalSeen) return;
    try {
      const run = await api(`/api/runs/${encodeURIComponent(id)}`);
      if (dash.runId !== id || terminalSeen) return;
      applyRun(run, false);
      if (ENDED.has(run.status) && !lastProgressed) {
        // The run ended and its stream has nothing after our last event (e.g. bench serve was
        // restarted and reads the run back from its directory): the run object has the end.
        finishFromRun(run);
        return;
      }
      openStream(id, dash.lastId);
    } catch (e) {
      if (dash.runId !== id) return;
      if (e.status === 401) { setConn('needs a token'); return; }
      if (e.status === 404) { setConn('gone'); notice(`Run ${id}: ${e.message}`); return; }
      setConn('reconnecting…');
      notice(`Lost the event stream: ${e.message}; retrying.`);
      reopenTimer = setTimeout(() => recover(id), backoff);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  function finishFromRun(run) {
    terminalSeen = true;
    closeStream();
    setConn('ended');
    setStatus(run.status);
    if (run.summary) { showSummary(run.summary); finalNumbers(run.summary, run.status === 'completed'); }
    if (run.error) notice(`Error: ${run.error}`);
    refreshRuns();
  }

  function onMessage(m) {
    let e;
    try { e = JSON.parse(m.data); } catch (_) { return; }
    if (!e || typeof e !== 'object') return;
    const id = typeof e.id === 'number' ? e.id : m.lastEventId ? Number(m.lastEventId) : null;
    if (e.event === 'stream.lagged') {
      dash.lagged += 1;
      pending.log.push(e);
      schedule();
      return;
    }
    if (id === null || !Number.isFinite(id)) return;
    dash.received += 1;
    if (id <= dash.lastId || seen.has(id)) { dash.duplicates += 1; return; }
    if (id !== dash.lastId + 1) dash.gaps += 1;
    seen.add(id);
    dash.lastId = id;
    dash.eventIds.push(id);
    processEvent(e);
    schedule();
  }

  function processEvent(e) {
    switch (e.event) {
      case 'run.created':
        if (dash.status === 'none') setStatus('starting');
        if (e.kind) setKind(e.kind);
        setText('#run-meta', `${e.kind || 'replay'}${e.utc ? ` · created ${fmtTime(e.utc)}` : ''}`);
        pending.log.push(e);
        break;
      case 'run.started':
      case 'run.resumed':
        if (!ENDED.has(dash.status)) setStatus('running');
        if (e.turns_planned !== undefined && e.turns_planned !== null) setText('#turns-planned', fmtInt(e.turns_planned));
        if (e.concurrency) setText('#concurrency', fmtInt(e.concurrency));
        pending.log.push(e);
        if (e.event === 'run.started' && dash.connection === 'live') refreshRuns();
        break;
      case 'progress':
        if (!ENDED.has(dash.status) && dash.status !== 'running') setStatus('running');
        pending.progress = e;
        if (typeof e.elapsed_s === 'number') {
          charts.tokps.push(e.elapsed_s, [e.output_tok_s]);
          charts.ttft.push(e.elapsed_s, [e.ttft_p50_ms, e.ttft_p99_ms]);
          charts.active.push(e.elapsed_s, [e.active]);
        }
        break;
      case 'turn.completed':
        pending.turns.push(e);
        if (pending.turns.length > MAX_TURN_ROWS * 4) pending.turns.splice(0, pending.turns.length - MAX_TURN_ROWS);
        break;
      case 'journey.run':
        $('#journeys').hidden = false;
        $('#journeys-body').append(el('tr', { class: e.n_failures ? 'row-bad' : '' },
          el('td', { text: e.journey }), el('td', { class: 'num', text: fmtInt(e.run) }),
          el('td', { class: 'num', text: fmtInt(e.n_success) }), el('td', { class: 'num', text: fmtInt(e.n_failures) }),
          el('td', { class: 'num', text: `${fmtNum(e.p50_ms)} ms` }), el('td', { class: 'num', text: `${fmtNum(e.p99_ms)} ms` }),
          el('td', { text: e.setup_failure || '' })));
        break;
      case 'heartbeat':
        break;
      case 'run.completed':
      case 'run.failed':
      case 'run.cancelled':
        terminalSeen = true;
        closeStream();
        setConn('ended');
        // A run found on disk with no recorded end is replayed with a terminal event whose
        // status says so (`unfinished`): the status field wins over the event's name.
        setStatus(typeof e.status === 'string' && e.status ? e.status : e.event.slice(4));
        showSummary(e.summary);
        finalNumbers(e.summary, e.event === 'run.completed');
        notice(e.event === 'run.failed' && e.error ? `The run failed: ${e.error}` : '');
        pending.log.push(e);
        refreshRuns();
        break;
      default:
        pending.log.push(e);
    }
  }

  // `initial`: the run object comes before its stream (show what it says); otherwise the stream
  // is the authority and the object only refreshes the header.
  function applyRun(run, initial) {
    if (!run || run.id !== dash.runId) return;
    if (initial && run.kind) setKind(run.kind);
    setText('#run-meta', `${run.kind} · created ${fmtTime(run.created_utc)}${run.finished_utc ? ` · finished ${fmtTime(run.finished_utc)}` : ''}${run.dir ? ` · ${run.dir}` : ''}`);
    if (initial || run.status === 'unfinished') {
      if (!terminalSeen) setStatus(run.status);
      if (run.error) notice(`Error: ${run.error}`);
      if (run.summary) showSummary(run.summary);
      if (run.progress && !dash.eventIds.length) pending.progress = run.progress;
    }
    schedule();
  }

  async function watchRun(id, runObj) {
    closeStream();
    resetRunView(id);
    setStatus(runObj ? runObj.status : 'loading');
    if (runObj) applyRun(runObj, true);
    markSelected();
    if (location.hash !== `#run=${encodeURIComponent(id)}`) history.replaceState(null, '', `#run=${encodeURIComponent(id)}`);
    openStream(id, 0);
    if (!runObj) {
      try { const run = await api(`/api/runs/${encodeURIComponent(id)}`); if (dash.runId === id) applyRun(run, !dash.eventIds.length); }
      catch (e) { if (dash.runId === id) notice(`Run ${id}: ${e.message}`); }
    }
  }

  // ---------------------------------------------------------------- the runs list
  let runsTimer = 0;
  let runsBusy = false;
  async function refreshRuns() {
    if (runsBusy) return;
    runsBusy = true;
    try {
      const data = await api('/api/runs');
      renderRuns(data);
      return data;
    } catch (e) {
      runsKey = '';
      if (e.status !== 401) setText('#runs-empty', `Cannot list runs: ${e.message}`);
      $('#runs-empty').hidden = false;
      return null;
    } finally {
      runsBusy = false;
    }
  }
  let runsKey = '';
  function renderRuns(data) {
    const list = $('#runs-list');
    const runs = (data && data.runs) || [];
    // Redraw only on a change (a redraw every few seconds would take the keyboard focus away).
    const key = JSON.stringify([data && data.active, runs.map((r) => [r.id, r.kind, r.status, r.created_utc])]);
    if (key === runsKey) return;
    runsKey = key;
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.run : null;
    list.replaceChildren(...runs.map((r) => {
      const b = el('button', { type: 'button', class: 'run-item', 'data-run': r.id, 'aria-label': `Open run ${r.id}, ${r.kind}, ${r.status}` },
        el('span', { class: 'run-line' }, el('code', { text: r.id }), el('span', { class: 'badge', 'data-status': r.status, text: r.status })),
        el('span', { class: 'muted small', text: `${r.kind} · ${fmtTime(r.created_utc)}${data.active === r.id ? ' · active' : ''}` }));
      b.addEventListener('click', () => watchRun(r.id, r));
      return el('li', null, b);
    }));
    setText('#runs-empty', 'No runs yet.');
    $('#runs-empty').hidden = runs.length > 0;
    markSelected();
    if (focused) { const b = list.querySelector(`[data-run="${CSS.escape(focused)}"]`); if (b) b.focus(); }
  }
  function markSelected() {
    for (const b of document.querySelectorAll('.run-item')) {
      const on = b.dataset.run === dash.runId;
      b.classList.toggle('selected', on);
      if (on) b.setAttribute('aria-current', 'true'); else b.removeAttribute('aria-current');
    }
  }

  // ---------------------------------------------------------------- the form
  function intField(sel) {
    const v = $(sel).value.trim();
    if (v === '') return null;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new Error(`${$(`label[for="${sel.slice(1)}"]`).textContent} must be a non-negative number`);
    return n;
  }
  // A duration as the run spec writes it ("50ms"; "12500us" when not a whole number of ms).
  const msText = (ms) => (Number.isInteger(ms) ? `${ms}ms` : `${Math.round(ms * 1000)}us`);
  function specFromForm() {
    const spec = {};
    const plan = {};
    if ($('#f-dataset').value === 'random') {
      const r = {};
      const turns = intField('#f-turns'); if (turns !== null) r.turns = turns;
      const inc = intField('#f-input'); if (inc !== null) r.input_increment = inc;
      const out = intField('#f-output'); if (out !== null) r.output_len = out;
      plan.dataset = { random: r };
    } else {
      plan.dataset = 'sample';
    }
    const sessions = intField('#f-sessions'); if (sessions !== null) plan.num_sessions = sessions;
    spec.plan = plan;
    const c = intField('#f-concurrency'); if (c !== null) spec.load = { closed: { concurrency: c } };
    const lat = $('#f-latency').value;
    const latency = lat === 'fixed' ? { mode: 'fixed', ttft: msText(intField('#f-ttft') ?? 0), itl: msText(intField('#f-itl') ?? 0) } : { mode: lat };
    spec.target = { embedded: { latency } };
    const d = intField('#f-duration'); if (d !== null) spec.limits = { duration: Number.isInteger(d) ? `${d}s` : msText(d * 1000) };
    const slo = intField('#f-slo'); if (slo !== null) spec.graders = { slo: { ttft_ms: slo } };
    return spec;
  }
  function formError(msg, activeId) {
    const box = $('#form-error');
    box.replaceChildren();
    if (!msg) { box.hidden = true; return; }
    box.append(el('strong', { text: 'Not started: ' }), msg);
    if (activeId) {
      const b = el('button', { type: 'button', id: 'open-active', class: 'secondary small-btn', text: `Open run ${activeId}` });
      b.addEventListener('click', () => { formError(null); watchRun(activeId); });
      box.append(' ', b);
    }
    box.hidden = false;
  }
  async function onSubmit(ev) {
    ev.preventDefault();
    formError(null);
    let body;
    const raw = $('#f-spec').value.trim();
    try {
      if (raw) {
        try { body = JSON.stringify(JSON.parse(raw)); } catch (e) { throw new Error(`the advanced run spec is not valid JSON: ${e.message}`); }
      } else {
        body = JSON.stringify(specFromForm());
      }
    } catch (e) { formError(e.message); return; }
    const btn = $('#start');
    btn.disabled = true;
    btn.textContent = 'Starting…';
    try {
      const run = await api('/api/runs', { method: 'POST', body });
      watchRun(run.id, run);
      refreshRuns();
    } catch (e) {
      const active = e.status === 409 && e.body && e.body.active;
      formError(`${e.status ? `${e.status}: ` : ''}${e.message}`, active);
    } finally {
      btn.disabled = false;
      btn.textContent = 'Start run';
    }
  }
  function syncForm() {
    const random = $('#f-dataset').value === 'random';
    for (const e of document.querySelectorAll('[data-random]')) e.hidden = !random;
    const fixed = $('#f-latency').value === 'fixed';
    for (const e of document.querySelectorAll('[data-fixed]')) e.hidden = !fixed;
  }

  async function onCancel() {
    const id = dash.runId;
    if (!id) return;
    const b = $('#cancel');
    b.disabled = true;
    try {
      const run = await api(`/api/runs/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
      notice('Cancelling: no new turn starts; turns in flight finish.');
      if (run && run.id === id && !terminalSeen) setText('#run-meta', `${run.kind} · created ${fmtTime(run.created_utc)}`);
    } catch (e) {
      notice(`Cancel: ${e.message}`);
    } finally {
      b.disabled = false;
    }
  }

  // ---------------------------------------------------------------- start
  async function init() {
    readTokenFromHash();
    initCharts();
    syncForm();
    $('#f-dataset').addEventListener('change', syncForm);
    $('#f-latency').addEventListener('change', syncForm);
    $('#run-form').addEventListener('submit', onSubmit);
    $('#cancel').addEventListener('click', onCancel);
    $('#runs-refresh').addEventListener('click', refreshRuns);
    $('#fill-spec').addEventListener('click', () => {
      try { $('#f-spec').value = JSON.stringify(specFromForm(), null, 2); formError(null); } catch (e) { formError(e.message); }
    });
    $('#token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('#token-input').value.trim();
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
      $('#token-input').value = '';
      $('#token-form').hidden = true;
      boot();
    });
    window.addEventListener('hashchange', () => {
      readTokenFromHash();
      const m = location.hash.match(/^#run=(.+)$/);
      if (m && decodeURIComponent(m[1]) !== dash.runId) watchRun(decodeURIComponent(m[1]));
    });
    setStatus('none');
    schedule();
    await boot();
    runsTimer = setInterval(() => { if (!document.hidden) refreshRuns(); }, 5000);
  }
  async function boot() {
    const data = await refreshRuns();
    const m = location.hash.match(/^#run=(.+)$/);
    const wanted = m ? decodeURIComponent(m[1]) : null;
    if (wanted && wanted !== dash.runId) { watchRun(wanted); return; }
    if (dash.runId) { if (!es && !terminalSeen) openStream(dash.runId, dash.lastId); return; }
    if (data && data.active) watchRun(data.active, (data.runs || []).find((r) => r.id === data.active));
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init); else init();
  void runsTimer;
})();
