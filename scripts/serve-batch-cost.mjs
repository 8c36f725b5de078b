// What one batch costs the server process: CPU seconds and context switches (read from /proc,
// all threads) over 32 concurrent non-streaming /v1/completions of 64 tokens each (EOS
// suppressed), prompts of 256..1024 characters cut from the model's held-out text. Linux only;
// loopback; the server is started and stopped here (docs/SERVER.md "Load test").
//   node scripts/serve-batch-cost.mjs [BINARY [MODEL]]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
const bin = process.argv[2] ?? 'build/dsv41';
const model = process.argv[3] ?? 'models/dsv41-mini';
const heldout = fs.readdirSync(model + '/heldout').map((f) => fs.readFileSync(model + '/heldout/' + f, 'utf8')).join('\n');
const proc = spawn(bin, ['serve', '-m', model, '--port', '0', '--parallel', '32', '--ctx', '2048', '--max-queue', '1024', '--quiet'], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const port = await new Promise((res) => proc.stderr.on('data', (d) => { log += d; const m = log.match(/ready: http:\/\/[^:]+:(\d+)/); if (m) res(Number(m[1])); }));
const switches = () => {
  let v = 0, n = 0;
  for (const t of fs.readdirSync(`/proc/${proc.pid}/task`)) {
    const s = fs.readFileSync(`/proc/${proc.pid}/task/${t}/status`, 'utf8');
    v += Number(s.match(/^voluntary_ctxt_switches:\s+(\d+)/m)[1]);
    n += Number(s.match(/^nonvoluntary_ctxt_switches:\s+(\d+)/m)[1]);
  }
  return { v, n };
};
const cpu = () => { const f = fs.readFileSync(`/proc/${proc.pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100; };
const before = switches(), c0 = cpu(), t0 = performance.now();
const outs = await Promise.all(Array.from({ length: 32 }, (_, i) => {
  const at = (i * 7919 * 13) % (heldout.length - 1024);
  return fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: model.split('/').filter(Boolean).pop(), prompt: heldout.slice(at, at + 256 + (i % 4) * 256), max_tokens: 64, temperature: 0, logit_bias: { 1: -100 } }) }).then((r) => r.json());
}));
const secs = (performance.now() - t0) / 1000, after = switches(), c1 = cpu();
const tokens = outs.reduce((a, o) => a + o.usage.completion_tokens, 0);
console.log(JSON.stringify({ bin, tokens, seconds: +secs.toFixed(2), tok_s: +(tokens / secs).toFixed(1), voluntary_switches: after.v - before.v, involuntary_switches: after.n - before.n, server_cpu_s: +(c1 - c0).toFixed(2) }));
proc.kill('SIGTERM');
await new Promise((r) => proc.on('exit', r));
