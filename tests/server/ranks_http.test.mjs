// `dsv41 serve --ranks N` (issue 17 item 2): the server over N expert-parallel ranks in one
// process (the routed experts spread over them, the requests over their schedulers). Concurrent
// clients must get what `dsv41 generate` computes on one engine, sampled and greedy, with DSpark
// too (its sampled drafts verified by the rejection rule: one engine's DSpark run is the
// reference there); the prefix cache, not served across ranks yet, is refused before the model loads.
// Needs node only.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, metrics, streamedAndWholeChat, BINARY, MODEL, MODEL_ID } from './harness.mjs';

const REQUESTS = [
  { id: 'a', prompt_ids: [1, 500, 600, 700], max_tokens: 10 },
  { id: 'b', prompt_ids: [1, 17, 300, 301, 302, 303, 304, 90], max_tokens: 7, temperature: 0.8, seed: 11 },
  { id: 'c', prompt_ids: [1, 42], max_tokens: 12, temperature: 0.7, top_p: 0.9, seed: 3 },
  { id: 'd', prompt_ids: [1, 900, 901, 902, 903], max_tokens: 9 },
  { id: 'e', prompt_ids: [1, 250, 251], max_tokens: 6, temperature: 1.0, seed: 99 },
];
let two, three, want, wantDspark;

function run(args) {
  return new Promise((resolve) => {
    execFile(BINARY, args, { maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

async function complete(server, r) {
  const res = await fetch(server.base + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, prompt: r.prompt_ids, max_tokens: r.max_tokens, temperature: r.temperature ?? 0,
                           top_p: r.top_p ?? 1, seed: r.seed ?? 0 }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

before(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv41-ranks-'));
  const file = path.join(dir, 'r.jsonl');
  fs.writeFileSync(file, REQUESTS.map((r) => JSON.stringify({ temperature: 0, seed: 0, ...r })).join('\n') + '\n');
  const oneEngine = async (extra) => {
    const g = await run(['generate', '-m', MODEL, '--requests', file, '--threads', '1', ...extra]);
    assert.equal(g.code, 0, g.stderr);
    return Object.fromEntries(g.stdout.trim().split('\n').map((l) => JSON.parse(l)).map((o) => [o.id, o]));
  };
  want = await oneEngine([]);
  wantDspark = await oneEngine(['--dspark', '2']);
  fs.rmSync(dir, { recursive: true });
  two = await startServer(['--ranks', '2', '--parallel', '2']);
  three = await startServer(['--ranks', '3', '--dspark', '2']);
});
after(async () => {
  for (const s of [two, three]) if (s) assert.equal((await s.stop()).code, 0);
});

test('the server says it runs ranks', () => {
  assert.match(two.log(), /2 expert-parallel ranks/);
  assert.match(two.log(), /parallel 2 per rank/);
  assert.match(three.log(), /3 expert-parallel ranks/);
});

for (const which of ['two', 'three']) {
  test(`concurrent completions over ${which} ranks equal one engine's`, async () => {
    const server = which === 'two' ? two : three;
    const reference = which === 'two' ? want : wantDspark;
    const got = await Promise.all(REQUESTS.map((r) => complete(server, r)));
    REQUESTS.forEach((r, i) => {
      assert.equal(got[i].choices[0].text, reference[r.id].text, `request ${r.id}`);
      assert.equal(got[i].usage.completion_tokens, reference[r.id].ids.length, `request ${r.id}`);
    });
    const m = await metrics(server.base);
    assert.ok(m['dsv41_generation_tokens_total'] >= REQUESTS.reduce((n, r) => n + reference[r.id].ids.length, 0));
    if (which === 'three') assert.ok(m['dsv41_dspark_drafts_verified_total'] > 0, 'no drafts verified over ranks');
  });
}

test('a streamed answer over ranks equals the whole one', async () => {
  const [streamed, whole] = await streamedAndWholeChat(two.base);
  assert.equal(streamed, whole);
});

test('--ranks with --cache-dir is refused before the model loads', async () => {
  const r = await run(['serve', '-m', '/nonexistent', '--ranks', '2', '--cache-dir', '/tmp/dsv41-unused']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /not served across ranks/);
  assert.doesNotMatch(r.stderr, /nonexistent/);
});
