#!/usr/bin/env node
// load_trace: load a Chrome trace-event JSON file in speedscope (the real app, its own import code, in headless
// Chromium) and print, as JSON on stdout, what speedscope parsed.
//
//   node load_trace.mjs TRACE.json     -> stdout: {"consumer","importer","profiles":[...],"warnings":[...],...}
//   node load_trace.mjs --check        -> exit 0 if the consumer is installed, else prints why and exits 3
//
// It does what speedscope's own CLI (`speedscope FILE`) does: opens speedscope's dist/release/index.html with
// #localProfilePath=X.js, where X.js calls speedscope.loadFileFromBase64(name, base64). The parsed profile group is
// then taken from speedscope's own exporter (Ctrl+S, "Export"): the .speedscope.json blob it writes is captured and
// turned into slices (a slice per OPEN/CLOSE pair).
//
// Exit codes: 0 parsed; 1 speedscope rejected the file (import error, unrecognized format, empty, timeout);
// 2 usage or I/O error; 3 the consumer (node modules or Chromium) is missing.
// Env: CHROMIUM (default /usr/bin/chromium), LOAD_TRACE_TIMEOUT_MS (default 120000).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';

const require = createRequire(import.meta.url);
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const timeoutMs = Number(process.env.LOAD_TRACE_TIMEOUT_MS || 120000);

function fail(code, msg) {
  process.stderr.write(`load_trace: ${msg}\n`);
  process.exit(code);
}

// Locate the consumer: speedscope's release bundle, puppeteer-core, Chromium.
function locate() {
  let ssDir, ssVersion, pptrVersion;
  try {
    const pj = require.resolve('speedscope/package.json');
    ssDir = path.dirname(pj);
    ssVersion = JSON.parse(fs.readFileSync(pj, 'utf8')).version;
  } catch (e) {
    return {missing: `npm package speedscope not found from ${import.meta.dirname ?? '.'} (run npm ci there)`};
  }
  try {
    pptrVersion = JSON.parse(fs.readFileSync(require.resolve('puppeteer-core/package.json'), 'utf8')).version;
  } catch (e) {
    return {missing: 'npm package puppeteer-core not found (run npm ci)'};
  }
  const index = path.join(ssDir, 'dist', 'release', 'index.html');
  if (!fs.existsSync(index)) return {missing: `${index} does not exist`};
  try {
    fs.accessSync(chromium, fs.constants.X_OK);
  } catch (e) {
    return {missing: `${chromium} is not executable (apt-get install chromium, or set CHROMIUM)`};
  }
  return {index, ssVersion, pptrVersion};
}

const args = process.argv.slice(2);
const where = locate();
if (args[0] === '--check') {
  if (where.missing) fail(3, where.missing);
  process.stdout.write(`speedscope@${where.ssVersion} puppeteer-core@${where.pptrVersion} ${chromium}\n`);
  process.exit(0);
}
if (args.length !== 1) fail(2, 'usage: load_trace.mjs TRACE.json | --check');
if (where.missing) fail(3, where.missing);

const tracePath = path.resolve(args[0]);
let bytes;
try {
  bytes = fs.readFileSync(tracePath);
} catch (e) {
  fail(2, `cannot read ${tracePath}: ${e.message}`);
}

// speedscope picks the importer by file name first (e.g. *.chrome.json, Trace-*, *.speedscope.json) and then by
// content. A neutral name makes it sniff the content, as it does for rprof's `--trace-out x.json`.
const fileName = path.basename(tracePath);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'load_trace-'));
const loaderJs = path.join(tmp, 'profile.js');
fs.writeFileSync(
  loaderJs,
  `speedscope.loadFileFromBase64(${JSON.stringify(fileName)}, ${JSON.stringify(bytes.toString('base64'))})`,
);

const {default: puppeteer} = await import('puppeteer-core');
const t0 = Date.now();
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  // root needs --no-sandbox; speedscope needs WebGL, which headless Chromium gets from SwiftShader.
  // The rest keep Chromium off the (closed) network.
  args: ['--no-sandbox', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--disable-dev-shm-usage',
         '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
         '--disable-quic', '--disable-default-apps'],
});

const result = {
  consumer: `speedscope@${where.ssVersion}`,
  browser: await browser.version(),
  file: tracePath,
  importer: null,
  profiles: [],
  warnings: [],
  errors: [],
  alerts: [],
};
let exitCode = 1;
try {
  const page = await browser.newPage();
  // Keep the exported blob (speedscope's saveFile makes one with URL.createObjectURL and clicks a download link).
  await page.evaluateOnNewDocument(() => {
    window.__exported = [];
    const orig = URL.createObjectURL.bind(URL);
    URL.createObjectURL = blob => {
      window.__exported.push(blob);
      return orig(blob);
    };
  });
  const cdp = await page.createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', {behavior: 'deny'}).catch(() => {});
  let importerDone = false, importFailed = false, importMs = null;
  page.on('console', msg => {
    const text = msg.text();
    if (msg.type() === 'warn' || msg.type() === 'warning') result.warnings.push(text);
    else if (msg.type() === 'error') result.errors.push(text);
    if (text.startsWith('Importing ')) result.importer = text;
    if (text.startsWith('Failed to load format')) {
      importFailed = true;
      result.errors.push(text);
    }
    const m = /^import: ([\d.]+) ?ms/.exec(text);
    if (m) importMs = Number(m[1]);
  });
  page.on('pageerror', err => result.errors.push(`pageerror: ${err.message}`));
  page.on('dialog', async d => {
    result.alerts.push(d.message());
    importFailed = true;
    await d.dismiss();
  });

  const url = `${pathToFileURL(where.index).href}#localProfilePath=${loaderJs}`;
  await page.goto(url, {waitUntil: 'domcontentloaded', timeout: timeoutMs});
  // Success: speedscope sets document.title to "<name> - speedscope" once the profile group is in its store.
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (importFailed) break;
    const title = await page.title();
    if (title.endsWith(' - speedscope')) {
      importerDone = true;
      break;
    }
    if (Date.now() > deadline) {
      result.errors.push(`timed out after ${timeoutMs} ms waiting for speedscope to load the file`);
      break;
    }
    await new Promise(r => setTimeout(r, 50));
  }
  result.import_ms = importMs;
  if (importerDone) {
    // Speedscope's own exporter (Ctrl+S) serializes the profile group it built.
    await page.keyboard.down('Control');
    await page.keyboard.press('s');
    await page.keyboard.up('Control');
    await page.waitForFunction(() => window.__exported.length > 0, {timeout: timeoutMs});
    const exported = JSON.parse(await page.evaluate(() => window.__exported[0].text()));
    result.exporter = exported.exporter;
    result.name = exported.name;
    result.profiles = exported.profiles.map(p => toSlices(p, exported.shared.frames));
    exitCode = 0;
  }
} catch (e) {
  result.errors.push(`load_trace: ${e.stack || e}`);
  exitCode = 1;
} finally {
  await browser.close().catch(() => {});
  fs.rmSync(tmp, {recursive: true, force: true});
}
result.total_ms = Date.now() - t0;
// stdout may be a pipe, where writes are asynchronous: exit only once the write is done, or the output is cut.
process.stdout.write(JSON.stringify(result, null, 1) + '\n', () => process.exit(exitCode));

// An evented speedscope profile as slices: one per OPEN_FRAME/CLOSE_FRAME pair, with its depth, in open order.
// `name` is speedscope's frame name: for trace events that is the event's name, then " " + JSON.stringify(args)
// when the event has args. Times are in the profile's `unit` (microseconds), relative to the first event of the
// track (speedscope rebases each pid/tid track to start at 0).
function toSlices(p, frames) {
  const stack = [], slices = [];
  for (const ev of p.events) {
    if (ev.type === 'O') {
      const s = {name: frames[ev.frame].name, start: ev.at, end: null, depth: stack.length};
      stack.push(s);
      slices.push(s);
    } else {
      const s = stack.pop();
      if (!s || frames[ev.frame].name !== s.name) throw new Error(`unbalanced export in ${p.name}`);
      s.end = ev.at;
    }
  }
  return {name: p.name, type: p.type, unit: p.unit, start: p.startValue, end: p.endValue,
          duration: p.endValue - p.startValue, slices};
}
