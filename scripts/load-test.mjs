#!/usr/bin/env node
// Load test of `dsv41 serve` (docs/SERVER.md "Load test"): starts the server on a loopback port,
// runs C concurrent streaming clients for D seconds (mixed prompt lengths, a share of early
// aborts), samples the server's RSS, and reports server errors, throughput, and p50 / p99
// time-to-first-token and inter-token latency. Then the overhead check: the same batch of
// requests through the server (32 at once, /v1/completions, EOS suppressed) and through
// `dsv41 generate --parallel 32`, aggregate generated tokens/s of each.
// Bounded: loopback only, --duration seconds (default 300), nothing left running.
//
//   node scripts/load-test.mjs [--binary build/dsv41] [--model models/dsv41-mini]
//        [--clients 32] [--duration 300] [--abort-share 0.1] [--compare 32] [--threads 0]
//        [--phases load,single,overhead] [--depth full]
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const BINARY = args.binary ?? 'build/dsv41';
const MODEL = args.model ?? 'models/dsv41-mini';
const CLIENTS = Number(args.clients ?? 32);
const DURATION = Number(args.duration ?? 300);
const ABORT_SHARE = Number(args['abort-share'] ?? 0.1);
const COMPARE = Number(args.compare ?? 32);
const THREADS = String(args.threads ?? 0);
const PHASES = (args.phases ?? 'load,single,overhead').split(',');
const DEPTH = args.depth ?? 'full';  // the prefill depth of both the server and generate
const config = JSON.parse(fs.readFileSync(path.join(MODEL, 'config.json'), 'utf8'));
const EOS = config.eos_token_id ?? config.text_config?.eos_token_id;

// Prompt text: the model's held-out files, cut to mixed lengths (characters ~ 4 per token).
const heldout = fs.readdirSync(path.join(MODEL, 'heldout')).map((f) => fs.readFileSync(path.join(MODEL, 'heldout', f), 'utf8')).join('\n');
const LENGTHS = [64, 256, 1024, 4096];
let rng = 12345;
const rand = () => ((rng = (rng * 1103515245 + 12345) % 2147483648) / 2147483648);
const prompt = () => {
  const n = LENGTHS[Math.floor(rand() * LENGTHS.length)];
  const at = Math.floor(rand() * (heldout.length - n));
  return heldout.slice(at, at + n);
};
const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function startServer(parallel) {
  const proc = spawn(BINARY, ['serve', '-m', MODEL, '--port', '0', '--parallel', String(parallel), '--ctx', '2048',
    '--max-queue', '1024', '--quiet', '--threads', THREADS, '--depth', DEPTH], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/ready: http:\/\/[^:]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (c) => reject(new Error('server exited ' + c + ': ' + log)));
  });
  return { proc, base: `http://127.0.0.1:${port}`, exited: new Promise((r) => proc.on('exit', (code) => r(code))) };
}

const rssMiB = (pid) => {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) / 1024 : NaN;
};

// One streaming chat request; returns its token timings, or throws on a server error.
async function streamOne(base, stats) {
  const abortAfter = rand() < ABORT_SHARE ? 1 + Math.floor(rand() * 20) : Infinity;
  const controller = new AbortController();
  const t0 = performance.now();
  const res = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ model: path.basename(path.resolve(MODEL)), messages: [{ role: 'user', content: prompt() }],
      max_tokens: 16 + Math.floor(rand() * 112), temperature: 0.8, stream: true }),
  });
  if (res.status >= 500) throw new Error(`HTTP ${res.status}`);
  if (res.status !== 200) {
    stats.rejected++;
    await res.text();
    return;
  }
  let buf = '', tokens = 0, last = 0;
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
        const j = JSON.parse(event.slice(6));
        if (j.error) throw new Error('error event: ' + j.error.message);
        const d = j.choices[0]?.delta ?? {};
        if (!d.content && !d.reasoning_content) continue;
        const now = performance.now();
        if (tokens === 0) stats.ttft.push(now - t0);
        else stats.itl.push(now - last);
        last = now;
        tokens++;
        stats.chunks++;
        if (tokens >= abortAfter) {
          stats.aborted++;
          controller.abort();
          return;
        }
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') return;
    throw e;
  }
  stats.completed++;
}

async function loadPhase(clients, seconds) {
  const server = await startServer(Math.min(clients, 32));
  const stats = { ttft: [], itl: [], chunks: 0, completed: 0, aborted: 0, rejected: 0, errors: 0, firstErrors: [] };
  const rss = { start: rssMiB(server.proc.pid), peak: 0, end: 0 };
  const sampler = setInterval(() => (rss.peak = Math.max(rss.peak, rssMiB(server.proc.pid))), 500);
  const t0 = performance.now(), end = t0 + seconds * 1000;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < end) {
      try {
        await streamOne(server.base, stats);
      } catch (e) {
        stats.errors++;
        if (stats.firstErrors.length < 3) stats.firstErrors.push(String(e.message ?? e));
      }
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  await new Promise((r) => setTimeout(r, 500));
  rss.end = rssMiB(server.proc.pid);
  const metrics = await (await fetch(server.base + '/metrics')).text();
  server.proc.kill('SIGTERM');
  const code = await server.exited;
  const generated = Number(metrics.match(/^dsv41_generation_tokens_total (\S+)/m)?.[1] ?? NaN);
  return { clients, seconds: wall, ...stats, ttft: undefined, itl: undefined, firstErrors: stats.firstErrors,
    generated_tokens: generated, tokens_per_s: generated / wall,
    ttft_ms: { p50: pct(stats.ttft, 50), p99: pct(stats.ttft, 99) }, itl_ms: { p50: pct(stats.itl, 50), p99: pct(stats.itl, 99) },
    rss_mib: rss, exit_code: code };
}

// The same batch through the server and through `dsv41 generate`.
async function overhead(n) {
  const reqs = Array.from({ length: n }, (_, i) => ({ id: String(i), prompt: prompt(), max_tokens: 64 }));
  const server = await startServer(n);
  const t0 = performance.now();
  const outs = await Promise.all(reqs.map(async (r) => {
    const res = await fetch(server.base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: path.basename(path.resolve(MODEL)), prompt: r.prompt, max_tokens: r.max_tokens, temperature: 0, logit_bias: { [EOS]: -100 } }) });
    return (await res.json()).usage.completion_tokens;
  }));
  const serverSeconds = (performance.now() - t0) / 1000;
  server.proc.kill('SIGTERM');
  await server.exited;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv41-load-'));
  const file = path.join(dir, 'requests.jsonl');
  fs.writeFileSync(file, reqs.map((r) => JSON.stringify({ ...r, ignore_eos: true })).join('\n') + '\n');
  // generate's own timing (its stderr summary): the batch only, not the model load.
  const gen = spawnSync(BINARY, ['generate', '-m', MODEL, '--requests', file, '--parallel', String(n), '--ctx', '2048', '--depth', DEPTH,
    '--out', path.join(dir, 'out.jsonl'), ...(THREADS !== '0' ? ['--threads', THREADS] : [])], { encoding: 'utf8' });
  const generateSeconds = Number(gen.stderr.match(/ in ([0-9.]+) s/)?.[1] ?? NaN);
  fs.rmSync(dir, { recursive: true, force: true });
  const tokens = outs.reduce((a, b) => a + b, 0);
  return { requests: n, tokens, server_tok_s: tokens / serverSeconds, generate_tok_s: tokens / generateSeconds,
    server_overhead: generateSeconds > 0 ? serverSeconds / generateSeconds - 1 : NaN };
}

const report = { date: new Date().toISOString(), host: os.hostname(), cpus: os.cpus().length, model: MODEL };
if (PHASES.includes('load')) report.load = await loadPhase(CLIENTS, DURATION);
if (PHASES.includes('single')) report.single = await loadPhase(1, Math.min(DURATION, 60));
if (PHASES.includes('overhead')) report.overhead = await overhead(COMPARE);
console.log(JSON.stringify(report, null, 2));
process.exit((report.load?.errors ?? 0) === 0 && (report.single?.errors ?? 0) === 0 ? 0 : 1);
