// `dsv41 serve --backend`: the server on the device backend (here its CPU emulation, which runs
// the GPU path's data flow and kernel bodies; the same script's GPU run is in
// scripts/gpu-serve-check.sh). What a client gets must be what `dsv41 generate` computes with the
// same backend, DSpark on the device drafter must not change it, and a bad --backend is refused
// before anything loads. Needs node only.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, metrics, streamedAndWholeChat, BINARY, MODEL, MODEL_ID } from './harness.mjs';

const PROMPT = [1, 500, 600, 700, 800, 900];
const MAX_TOKENS = 12;
let plain, drafting;

function run(args) {
  return new Promise((resolve) => {
    execFile(BINARY, args, { maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

async function complete(server, extra = {}) {
  const r = await fetch(server.base + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, prompt: PROMPT, max_tokens: MAX_TOKENS, temperature: 0, ...extra }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return r.json();
}

before(async () => {
  plain = await startServer(['--backend', 'device-emulation']);
  drafting = await startServer(['--backend', 'device-emulation', '--dspark', '2']);
});
after(async () => {
  for (const s of [plain, drafting]) if (s) assert.equal((await s.stop()).code, 0);
});

test('the server says which backend computes', () => {
  assert.match(plain.log(), /backend host \(device-backend emulation\)/);
});

test('a completion equals dsv41 generate on the same backend', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv41-backend-'));
  const requests = path.join(dir, 'r.jsonl');
  fs.writeFileSync(requests, JSON.stringify({ id: 'a', prompt_ids: PROMPT, max_tokens: MAX_TOKENS }) + '\n');
  const g = await run(['generate', '-m', MODEL, '--requests', requests, '--backend', 'device-emulation', '--threads', '1']);
  fs.rmSync(dir, { recursive: true });
  assert.equal(g.code, 0, g.stderr);
  const want = JSON.parse(g.stdout.trim().split('\n')[0]);
  const got = await complete(plain);
  assert.equal(got.choices[0].text, want.text);
  assert.equal(got.usage.completion_tokens, want.ids.length);
});

test('streamed and whole chat answers are the same', async () => {
  const [streamed, whole] = await streamedAndWholeChat(plain.base);
  assert.equal(streamed, whole);
});

test('DSpark on the device drafter does not change the output', async (t) => {
  if (/decoding without speculation/.test(drafting.log())) return t.skip('the model has no mtp.* drafter');
  assert.equal((await complete(drafting)).choices[0].text, (await complete(plain)).choices[0].text);
  const m = await metrics(drafting.base);
  assert.ok(m['dsv41_dspark_drafts_verified_total'] > 0, 'the server verified no drafts: ' + JSON.stringify(m));
  assert.equal((await metrics(plain.base))['dsv41_dspark_drafts_verified_total'], 0);
});

test('an unknown --backend is refused before the model loads', async () => {
  const r = await run(['serve', '-m', '/nonexistent', '--backend', 'tpu']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--backend/);
  assert.doesNotMatch(r.stderr, /nonexistent/);
});
