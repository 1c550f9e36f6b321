#!/usr/bin/env python3
"""/metrics means what its names say, checked against the test's own counts and clocks.

  python3 tests/server/test_metrics.py --server build/examples/serve --model M.gguf

KV blocks: tinfer:kv_cache_usage_perc is the share of the pool held by live sequences and
tinfer:prefix_cache_usage_perc the share held only by the prefix cache, each equal to its raw
block gauge over the pool's total, with sequence + prefix-only + free = total; while requests
run, their sequences hold at least the blocks their prompts fill (counted here from the usage
the clients got back); once idle, usage is 0 while the prefix cache still holds blocks.

Histograms (TTFT, inter-token, end-to-end): over a batch of streamed requests, each count
gained equals what the clients finished (tokens - 1 for inter-token), the server's sums are
within the clients' own clocks (server TTFT <= client TTFT, server e2e <= client e2e, the
inter-token sum <= e2e - TTFT), buckets never decrease, and every bucket counts at least the
requests the clients saw finish within its bound (the server's clock starts later and stops
earlier).
Exit codes: 0 pass, 1 fail, 77 skipped (no model or server binary; under CI=true: 1).
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prometheus_text as prom  # noqa: E402
from test_openai_clients import Server, check, http_request, missing_server_or_model  # noqa: E402

BLOCK_TOKENS = 16  # the server's PagedKv<> block size (examples/serve/serve.cpp)


def scrape(port):
    status, _, body = http_request(port, "GET", "/metrics", timeout=10)
    check(status == 200, f"/metrics answered {status}")
    return prom.parse(body.decode())


def blocks(samples):
    names = ("total", "sequence", "prefix_only", "free")
    b = {n: prom.value(samples, f"tinfer:kv_cache_{n}_blocks") for n in names}
    b["usage"] = prom.value(samples, "tinfer:kv_cache_usage_perc")
    b["prefix_usage"] = prom.value(samples, "tinfer:prefix_cache_usage_perc")
    return b


def check_block_gauges(b, when):
    check(b["total"] > 0, f"{when}: no blocks in the pool")
    check(b["sequence"] + b["prefix_only"] + b["free"] == b["total"],
          f"{when}: sequence {b['sequence']} + prefix-only {b['prefix_only']} + free {b['free']} "
          f"!= total {b['total']}")
    check(abs(b["usage"] - b["sequence"] / b["total"]) < 1e-6,
          f"{when}: kv_cache_usage_perc {b['usage']} != {b['sequence']}/{b['total']}")
    check(abs(b["prefix_usage"] - b["prefix_only"] / b["total"]) < 1e-6,
          f"{when}: prefix_cache_usage_perc {b['prefix_usage']} != "
          f"{b['prefix_only']}/{b['total']}")


def wait_idle(port, seconds=30):
    deadline = time.time() + seconds
    while True:
        s = scrape(port)
        idle = all(prom.value(s, n) == 0 for n in (
            "tinfer:num_requests_running", "tinfer:num_requests_waiting",
            "tinfer:num_requests_live", "tinfer:num_requests_admitted"))
        if idle:
            return s
        check(time.time() < deadline, f"not idle after {seconds} s")
        time.sleep(0.1)


def stream_request(port, body, on_chunk=None):
    """Streams a completion; returns the client's clocks and what it received."""
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    sent = time.monotonic()
    connection.request("POST", "/v1/completions", body=json.dumps(body),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:  # the message reads the body: only when it is an error
        check(False, f"status {response.status}: {response.read()[:200]}")
    first = last = None
    tokens, usage, done = 0, None, False
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        chunk = json.loads(line[len("data: "):])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            n = len(choice["logprobs"]["tokens"])
            if n:
                now = time.monotonic()
                first = first or now
                last = now
                tokens += n
                if on_chunk:
                    on_chunk(tokens)
    response.read()
    ended = time.monotonic()
    connection.close()
    check(done and usage and usage["completion_tokens"] == tokens,
          f"stream: done {done}, usage {usage}, {tokens} tokens")
    return {"sent": sent, "first": first, "last": last, "ended": ended, "tokens": tokens,
            "prompt": usage["prompt_tokens"]}


def distinct_prompt(i, length):
    # Token ids, distinct from the first one on, so no two requests share a cached block.
    return [1000 + 97 * i + (k * 31) % 89 for k in range(length)]


def test_kv_blocks(server):
    idle = blocks(wait_idle(server.port))
    check_block_gauges(idle, "before load")
    check(idle["sequence"] == 0 and idle["usage"] == 0, f"idle before load: {idle}")

    clients, prompt_length, max_tokens = 6, 100, 48
    progress = [0] * clients
    results = [None] * clients
    errors = []

    def run(i):
        def seen(tokens):
            progress[i] = tokens
        try:
            results[i] = stream_request(server.port, {
                "prompt": distinct_prompt(i, prompt_length), "max_tokens": max_tokens,
                "ignore_eos": True, "temperature": 0, "logprobs": 0, "stream": True,
                "stream_options": {"include_usage": True}}, seen)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    # Mid-load: once every client has tokens and none has all of them.
    deadline, during, seen = time.time() + 60, None, None
    while time.time() < deadline and during is None:
        if all(2 <= p < max_tokens - 8 for p in progress):
            seen = list(progress)  # the server computed at least these before the scrape
            s = scrape(server.port)
            if prom.value(s, "tinfer:num_requests_running") == clients:
                during = blocks(s)
        time.sleep(0.02)
    for t in threads:
        t.join()
    check(not errors, f"clients failed: {errors}")
    check(during is not None, "never saw every request running at once")
    check_block_gauges(during, "during load")
    # Each running sequence holds the blocks its prompt and the tokens the client had seen
    # fill (all but the last sampled token are in the cache), and no two share one.
    prompt_blocks = sum((r["prompt"] + n - 1 + BLOCK_TOKENS - 1) // BLOCK_TOKENS
                        for r, n in zip(results, seen))
    most = sum((r["prompt"] + max_tokens + BLOCK_TOKENS - 1) // BLOCK_TOKENS for r in results)
    check(prompt_blocks <= during["sequence"] <= most,
          f"during load: {during['sequence']} sequence blocks; the sequences fill at least "
          f"{prompt_blocks} and at most {most}")
    check(during["usage"] > 0, f"during load: usage {during['usage']}")

    after = blocks(wait_idle(server.port))
    check_block_gauges(after, "idle after load")
    check(after["sequence"] == 0 and after["usage"] == 0,
          f"idle after load: usage {after['usage']} ({after['sequence']} sequence blocks)")
    # The prefix cache kept what the prompts filled, and nothing it never computed.
    full_prompt_blocks = sum(r["prompt"] // BLOCK_TOKENS for r in results)
    check(after["prefix_only"] >= min(full_prompt_blocks, 1),
          f"idle after load: the prefix cache holds {after['prefix_only']} blocks")
    check(after["prefix_only"] - idle["prefix_only"] <= most,
          f"the prefix cache gained {after['prefix_only'] - idle['prefix_only']} blocks, more "
          f"than the {most} the requests could fill")
    print(f"  pool {int(after['total'])} blocks; during load {int(during['sequence'])} held by "
          f"{clients} sequences (prompts fill {prompt_blocks}, at most {most}), usage "
          f"{during['usage']:.3f}; idle after: usage {after['usage']}, prefix-only "
          f"{int(after['prefix_only'])} ({after['prefix_usage']:.3f}), free {int(after['free'])}")


def test_histograms(server):
    names = ("tinfer:time_to_first_token_seconds", "tinfer:inter_token_latency_seconds",
             "tinfer:e2e_request_latency_seconds")
    wait_idle(server.port)
    before_samples = scrape(server.port)
    before = {n: prom.histogram(before_samples, n) for n in names}
    finished_before = sum(prom.value(before_samples, "tinfer:request_success_total",
                                     finished_reason=r) for r in ("stop", "length", "abort"))
    results, errors = [], []
    lock = threading.Lock()

    def run(i):
        try:
            r = stream_request(server.port, {
                "prompt": f"Request {i}: a short story about the sea", "max_tokens": 6 + i % 5,
                "ignore_eos": True, "temperature": 0.8, "seed": i, "logprobs": 0,
                "stream": True, "stream_options": {"include_usage": True}})
            with lock:
                results.append(r)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    for wave in range(3):  # concurrent waves: queueing makes TTFTs differ
        threads = [threading.Thread(target=run, args=(wave * 4 + i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    check(not errors, f"clients failed: {errors}")
    after_samples = wait_idle(server.port)
    delta = {n: prom.histogram_delta(before[n], prom.histogram(after_samples, n)) for n in names}
    ttft, gap, e2e = (delta[n] for n in names)
    requests = len(results)
    finished = sum(prom.value(after_samples, "tinfer:request_success_total",
                              finished_reason=r) for r in ("stop", "length", "abort"))
    check(finished - finished_before == requests, f"{finished - finished_before} finished")
    check(ttft["count"] == requests, f"TTFT count {ttft['count']} != {requests} requests")
    check(e2e["count"] == requests, f"e2e count {e2e['count']} != {requests} requests")
    tokens = sum(r["tokens"] for r in results)
    check(gap["count"] == tokens - requests,
          f"inter-token count {gap['count']} != {tokens} tokens - {requests} requests")
    client_ttft = [r["first"] - r["sent"] for r in results]
    client_e2e = [r["ended"] - r["sent"] for r in results]
    check(0 < ttft["sum"] <= sum(client_ttft),
          f"server TTFT sum {ttft['sum']:.4f} s not in (0, client's {sum(client_ttft):.4f} s]")
    check(ttft["sum"] <= e2e["sum"] <= sum(client_e2e),
          f"server e2e sum {e2e['sum']:.4f} s not in [TTFT sum {ttft['sum']:.4f}, client's "
          f"{sum(client_e2e):.4f} s]")
    check(0 < gap["sum"] <= e2e["sum"] - ttft["sum"] + 1e-6,
          f"inter-token sum {gap['sum']:.4f} s not in (0, e2e - TTFT = "
          f"{e2e['sum'] - ttft['sum']:.4f} s]")
    # Per bucket: a request the client saw within a bound, the server saw within it too.
    for what, hist, clocks in (("TTFT", ttft, client_ttft), ("e2e", e2e, client_e2e)):
        for le, count in hist["buckets"]:
            within = sum(1 for c in clocks if c <= le)
            check(count >= within, f"{what} bucket le={le}: {count} < {within} the clients saw")
    print(f"  {requests} requests, {tokens} tokens: TTFT sum {ttft['sum']:.3f} s (clients "
          f"{sum(client_ttft):.3f} s), e2e sum {e2e['sum']:.3f} s (clients "
          f"{sum(client_e2e):.3f} s), inter-token sum {gap['sum']:.3f} s over {gap['count']:.0f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="")
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", default="2")
    args = parser.parse_args()
    code = missing_server_or_model(args)
    if code is not None:
        return code
    failures = []
    began = time.time()
    with Server(args.server, args.model, "--threads", args.threads) as server:
        for test in (test_kv_blocks, test_histograms):
            started = time.time()
            try:
                test(server)
                print(f"PASS {test.__name__} ({time.time() - started:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001
                failures.append(test.__name__)
                print(f"FAIL {test.__name__}: {e}", flush=True)
    print(f"{'FAILED: ' + ', '.join(failures) if failures else 'all passed'} "
          f"in {time.time() - began:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
