#!/usr/bin/env python3
"""`dsv41 serve --backend B` against `dsv41 generate --backend B` (a test oracle for the GPU run,
where node and the OpenAI SDK may be absent; `tests/server/backend_http.test.mjs` is the same
check on the CPU emulation in `make test`).

Eight greedy requests of different prompts go to the server at once (continuous batching); each
answer must equal generate's text for that prompt, with --dspark off and with --dspark auto (the
drafter on the device). Prints one JSON line per server with the wall time of the eight requests
and their aggregate tokens per second, and exits 1 on any difference or failure.

usage: serve_backend_check.py DSV41_BINARY MODEL_DIR BACKEND [MAX_TOKENS]
"""
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REQUESTS = 8


def prompts():
    return [[1] + [(97 * i + 31 * k) % 5000 + 100 for k in range(16 + 4 * i)] for i in range(REQUESTS)]


def generate(binary, model, backend, max_tokens):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, p in enumerate(prompts()):
            f.write(json.dumps({"id": str(i), "prompt_ids": p, "max_tokens": max_tokens}) + "\n")
        path = f.name
    out = subprocess.run([binary, "generate", "-m", model, "--requests", path, "--backend", backend,
                          "--parallel", str(REQUESTS)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit("generate failed: " + out.stderr)
    return {int(j["id"]): j["text"] for j in map(json.loads, out.stdout.splitlines())}


def start_server(binary, model, backend, extra):
    proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--backend", backend,
                             "--parallel", str(REQUESTS), "--served-model-name", "m", "--quiet"] + extra,
                            stderr=subprocess.PIPE, text=True)
    log = ""
    port = None
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log += line
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready:" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, port, log
    proc.kill()
    raise SystemExit("server did not get ready: " + log)


def complete(port, prompt, max_tokens, out, i):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            j = json.load(r)
            out[i] = (j["choices"][0]["text"], j["usage"]["completion_tokens"])
    except Exception as e:  # an HTTP error or a dropped connection: reported, counted as a difference
        detail = e.read().decode(errors="replace") if hasattr(e, "read") else ""
        out[i] = ("error: %s %s" % (e, detail), 0)


def check(binary, model, backend, max_tokens, want, extra):
    proc, port, log = start_server(binary, model, backend, extra)
    got = [None] * REQUESTS
    threads = [threading.Thread(target=complete, args=(port, p, max_tokens, got, i)) for i, p in enumerate(prompts())]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - t0
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    same = [got[i][0] == want[i] for i in range(REQUESTS)]
    tokens = sum(g[1] for g in got)
    print(json.dumps({"backend": backend, "server_options": extra, "requests": REQUESTS, "max_tokens": max_tokens,
                      "seconds": round(seconds, 3), "tokens": tokens, "tok_s": round(tokens / seconds, 1),
                      "equal_to_generate": sum(same), "exit_code": code,
                      "backend_line": next((l for l in log.splitlines() if "ready:" in l), ""),
                      "errors": [g[0] for g in got if g[0].startswith("error: ")][:2]}))
    return all(same) and code == 0


def main():
    binary, model, backend = sys.argv[1:4]
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    want = generate(binary, model, backend, max_tokens)
    ok = check(binary, model, backend, max_tokens, want, [])
    ok = check(binary, model, backend, max_tokens, want, ["--dspark", "auto"]) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
