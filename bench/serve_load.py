#!/usr/bin/env python3
"""A small closed load against a running serve: tokens/s of generation, as a client sees it.

  python3 bench/serve_load.py --port 8000 --clients 4 --requests 12 --max-tokens 32

`clients` threads each send requests back to back (distinct greedy completions with
ignore_eos, so every request generates exactly max_tokens) until `requests` are done. Reports
the wall time from the first send to the last answer, generated tokens / that time, and the
median and 90th percentile request latency. docs/scale-out.md compares serve --tp with one
process by it.
"""
import argparse
import http.client
import json
import statistics
import threading
import time


def complete(port, prompt, max_tokens):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": "tinfer", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    connection.request("POST", "/v1/completions", body=json.dumps(body),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {raw[:200]}")
    return json.loads(raw)["usage"]["completion_tokens"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    complete(args.port, "Warm-up.", 2)
    lock = threading.Lock()
    next_request = [0]
    latencies, tokens = [], [0]

    def client():
        while True:
            with lock:
                i = next_request[0]
                if i >= args.requests:
                    return
                next_request[0] += 1
            sent = time.monotonic()
            n = complete(args.port, f"Request {i}: tell a short story about the number {i}.",
                         args.max_tokens)
            with lock:
                latencies.append(time.monotonic() - sent)
                tokens[0] += n

    start = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    latencies.sort()
    print(f"{args.requests} requests x {args.max_tokens} tokens, {args.clients} clients: "
          f"{wall:.1f} s, {tokens[0] / wall:.2f} generated tokens/s, latency p50 "
          f"{statistics.median(latencies):.2f} s p90 {latencies[int(0.9 * (len(latencies) - 1))]:.2f} s")


if __name__ == "__main__":
    main()
