#!/usr/bin/env python3
"""A bounded soak of the server: --seconds (120) of seeded random traffic over loopback.

  python3 tests/server/test_soak.py --server build/examples/serve --model M.gguf

Requests arrive at random (Poisson, seeded): chat and completions, streamed and not, n = 1..3,
prompts of token ids up to just under the context (--max-model-len) and some past it, clients
that hang up while their answer is generated or queued, streams cut mid-way; a KV budget too
small for the concurrent load forces preemptions. Afterwards:
  - every request ended exactly once, each in a well-formed way: a complete JSON answer (one
    choice per n, a finish reason each, usage adding up), a complete stream ([DONE], a finish
    reason per choice, usage equal to the tokens streamed), or an error object with the
    status its kind calls for; only the clients' own hang-ups go unanswered;
  - on the server: every engine request submitted has ended exactly once
    (request_success_total = request_submitted_total), the request table and the admission
    count are empty, nothing runs or waits, the KV pool is back to idle (no block held by a
    sequence; prefix-only + free = total), preemptions happened;
  - the server's resident memory (VmRSS) grew less than 5% across the run's second half.
Prints requests, outcomes by kind, client p50/p99 TTFT and TPOT, RSS at the half and the end
(the figures in docs/server.md).
Exit codes: 0 pass, 1 fail, 77 skipped (no model or server binary; under CI=true: 1).
"""
import argparse
import collections
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prometheus_text as prom  # noqa: E402
from test_openai_clients import Server, check, http_request, missing_server_or_model  # noqa: E402

# --max-model-len of the soaked server: twice the engine's prefill chunk (256), so a preempted
# request comes back through a prefix-cache hit longer than its first chunk. That case made the
# engine throw "the scheduler planned more KV than the cache holds" until the scheduler priced
# the cached blocks an admission pins (kv/paged_cache.hpp admission_blocks); this test found it.
CONTEXT = 512
KV_BUDGET_MB = 40    # 58 blocks of 16 tokens for SmolLM2: two near-limit requests fill it
MAX_QUEUE = 24


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def scrape(port):
    status, _, body = http_request(port, "GET", "/metrics", timeout=10)
    check(status == 200, f"/metrics answered {status}")
    return prom.parse(body.decode())


class Outcomes:
    """One outcome per request id; a second one for the same request is a failure."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_request = {}
        self.problems = []
        self.ttft, self.tpot = [], []

    def record(self, request, kind, problem=None):
        with self.lock:
            if request in self.by_request:
                self.problems.append(f"request {request} ended twice: "
                                     f"{self.by_request[request]} and {kind}")
            self.by_request[request] = kind
            if problem:
                self.problems.append(f"request {request} ({kind}): {problem}")


MAX_N = 3


def plan_request(rng, index):
    """What request `index` asks for and how its client behaves."""
    roll = rng.random()
    plan = {"index": index, "stream": rng.random() < 0.5, "n": 1, "hangup": None,
            "chat": False, "expect": "ok"}
    if roll < 0.25:
        plan["chat"] = True
        plan["body"] = {"messages": [{"role": "system", "content": "You are brief."},
                                     {"role": "user", "content": f"Question {index}: name "
                                      f"{rng.randint(2, 9)} animals."}],
                        "max_tokens": rng.randint(4, 40)}
    else:
        if roll < 0.40:   # near the context limit
            max_tokens = rng.randint(2, 12)
            length = CONTEXT - max_tokens - rng.randint(0, 6)
        elif roll < 0.47:  # past it: a well-formed 400
            max_tokens = rng.randint(2, 40)
            length = CONTEXT - max_tokens + rng.randint(1, 64)
            plan["expect"] = "context_length_exceeded"
        else:
            max_tokens = rng.randint(4, 48)
            length = rng.randint(8, CONTEXT // 2)
        plan["body"] = {"prompt": [rng.randint(200, 40000) for _ in range(length)],
                        "max_tokens": max_tokens}
        if rng.random() < 0.2:
            plan["n"] = rng.randint(min(2, MAX_N), MAX_N)
    body = plan["body"]
    body.update({"temperature": rng.choice([0, 0.7, 1.0]), "seed": index,
                 "ignore_eos": rng.random() < 0.5})
    if plan["n"] > 1:
        body["n"] = plan["n"]
    if plan["stream"]:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    hang = rng.random()
    if plan["expect"] == "ok" and hang < 0.08:
        plan["hangup"] = ("after_send", rng.uniform(0.05, 1.5))   # queued or generating
    elif plan["expect"] == "ok" and plan["stream"] and hang < 0.16:
        plan["hangup"] = ("mid_stream", rng.randint(1, 4))        # after that many chunks
        body["max_tokens"] = max(body["max_tokens"], 24)
        body["ignore_eos"] = True
    return plan


def check_error(status, reply, expect):
    error = json.loads(reply)["error"]
    if set(error) != {"message", "type", "param", "code"} or not error["message"]:
        return None, f"malformed error object {error}"
    kinds = {400: "http_400", 429: "rate_limited", 503: "unavailable"}
    if expect == "context_length_exceeded":
        if status != 400 or error["code"] != "context_length_exceeded":
            return None, f"over the context: {status} {error}"
        return "context_length_exceeded", None
    if status == 429 and error["code"] == "rate_limit_exceeded":
        return "rate_limited", None
    return kinds.get(status, f"http_{status}"), f"unexpected error {status} {error}"


def run_request(port, plan, outcomes):
    path = "/v1/chat/completions" if plan["chat"] else "/v1/completions"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    i = plan["index"]
    try:
        sent = time.monotonic()
        connection.request("POST", path, body=json.dumps(plan["body"]),
                           headers={"Content-Type": "application/json"})
        if plan["hangup"] and plan["hangup"][0] == "after_send":
            time.sleep(plan["hangup"][1])
            connection.sock.shutdown(socket.SHUT_RDWR)
            return outcomes.record(i, "client_hangup_waiting")
        response = connection.getresponse()
        if response.status != 200:
            kind, problem = check_error(response.status, response.read(), plan["expect"])
            return outcomes.record(i, kind or "malformed_error", problem)
        if plan["expect"] != "ok":
            return outcomes.record(i, "unexpected_200", f"expected {plan['expect']}")
        if not plan["stream"]:
            answer = json.loads(response.read())
            choices = answer["choices"]
            problem = None
            if sorted(c["index"] for c in choices) != list(range(plan["n"])):
                problem = f"choices {[c['index'] for c in choices]} for n={plan['n']}"
            elif any(c["finish_reason"] not in ("stop", "length") for c in choices):
                problem = f"finish reasons {[c['finish_reason'] for c in choices]}"
            u = answer["usage"]
            if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
                problem = f"usage {u}"
            return outcomes.record(i, "ok_json", problem)
        first, last, tokens, finishes, usage, done, chunks = None, None, 0, {}, None, False, 0
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[len("data: "):])
            if "error" in chunk:
                return outcomes.record(i, "stream_error", f"{chunk}")
            chunks += 1
            usage = chunk.get("usage") or usage
            for c in chunk["choices"]:
                text = c.get("text") if not plan["chat"] else c["delta"].get("content")
                if text:
                    now = time.monotonic()
                    first = first or now
                    last = now
                if c.get("finish_reason"):
                    if c["index"] in finishes:
                        return outcomes.record(i, "malformed_stream",
                                               f"choice {c['index']} finished twice")
                    finishes[c["index"]] = c["finish_reason"]
            if plan["hangup"] and plan["hangup"][0] == "mid_stream" and \
                    chunks >= plan["hangup"][1]:
                connection.sock.shutdown(socket.SHUT_RDWR)
                return outcomes.record(i, "client_hangup_streaming")
        problem = None
        if not done:
            problem = "no [DONE]"
        elif sorted(finishes) != list(range(plan["n"])):
            problem = f"finish reasons {finishes} for n={plan['n']}"
        elif usage is None or usage["total_tokens"] != usage["prompt_tokens"] + \
                usage["completion_tokens"]:
            problem = f"usage {usage}"
        if not problem and first is not None:
            tokens = usage["completion_tokens"]
            with outcomes.lock:
                outcomes.ttft.append(first - sent)
                if plan["n"] == 1 and tokens > 1:
                    outcomes.tpot.append((last - first) / (tokens - 1))
        return outcomes.record(i, "ok_stream", problem)
    except Exception as e:  # noqa: BLE001 -- a request that broke is a finding, not a crash
        return outcomes.record(i, "client_exception", repr(e))
    finally:
        connection.close()


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))] if values else 0


def main():
    global MAX_N, CONTEXT
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="")
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--rate", type=float, default=1.2, help="requests per second")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--max-model-len", type=int, default=CONTEXT)
    parser.add_argument("--max-n", type=int, default=3, help="largest n of a request")
    parser.add_argument("--kv-budget-mb", type=int, default=KV_BUDGET_MB)
    args = parser.parse_args()
    code = missing_server_or_model(args)
    if code is not None:
        return code

    MAX_N, CONTEXT = args.max_n, args.max_model_len
    rng = random.Random(args.seed)
    outcomes = Outcomes()
    failures = []
    with Server(args.server, args.model, "--threads", args.threads, "--max-model-len",
                str(args.max_model_len), "--kv-budget-mb", str(args.kv_budget_mb), "--max-queue",
                str(MAX_QUEUE)) as server:
        pid = server.process.pid
        before = scrape(server.port)
        started = time.monotonic()
        half, rss = started + args.seconds / 2, {"start": rss_kib(pid)}
        threads, index = [], 0
        next_arrival = started
        while time.monotonic() < started + args.seconds:
            now = time.monotonic()
            if "half" not in rss and now >= half:
                rss["half"] = rss_kib(pid)
            if now < next_arrival:
                time.sleep(min(0.05, next_arrival - now))
                continue
            plan = plan_request(rng, index)
            index += 1
            t = threading.Thread(target=run_request, args=(server.port, plan, outcomes))
            t.start()
            threads.append(t)
            next_arrival += rng.expovariate(args.rate)
        rss["end"] = rss_kib(pid)
        for t in threads:
            t.join(180)
        stuck = sum(1 for t in threads if t.is_alive())
        # The server settles: hang-ups aborted, everything released.
        deadline, after = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            after = scrape(server.port)
            if all(prom.value(after, n) == 0 for n in (
                    "tinfer:num_requests_running", "tinfer:num_requests_waiting",
                    "tinfer:num_requests_live", "tinfer:num_requests_admitted",
                    "tinfer:kv_cache_sequence_blocks")):
                break
            time.sleep(0.2)
        rss["idle"] = rss_kib(pid)
        elapsed = time.monotonic() - started
        server_log = [line for line in server.output if "serve:" in line]

    kinds = collections.Counter(outcomes.by_request.values())
    delta = {}
    for name in ("tinfer:request_submitted_total", "tinfer:num_preemptions_total"):
        delta[name] = prom.value(after, name) - prom.value(before, name)
    ended = {r: prom.value(after, "tinfer:request_success_total", finished_reason=r) -
             prom.value(before, "tinfer:request_success_total", finished_reason=r)
             for r in ("stop", "length", "abort")}
    growth = (rss["end"] - rss["half"]) / rss["half"]
    print(f"  {index} requests in {elapsed:.0f} s (seed {args.seed}, {args.rate}/s): "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print(f"  engine requests (choices): submitted {delta['tinfer:request_submitted_total']:.0f}, "
          f"ended stop {ended['stop']:.0f} / length {ended['length']:.0f} / abort "
          f"{ended['abort']:.0f}; preemptions {delta['tinfer:num_preemptions_total']:.0f}")
    print(f"  client TTFT p50 {percentile(outcomes.ttft, 0.5) * 1e3:.0f} ms, p99 "
          f"{percentile(outcomes.ttft, 0.99) * 1e3:.0f} ms ({len(outcomes.ttft)} streams); TPOT "
          f"p50 {percentile(outcomes.tpot, 0.5) * 1e3:.0f} ms, p99 "
          f"{percentile(outcomes.tpot, 0.99) * 1e3:.0f} ms")
    print(f"  server VmRSS: start {rss['start'] / 1024:.1f} MiB, half {rss['half'] / 1024:.1f} "
          f"MiB, end {rss['end'] / 1024:.1f} MiB ({growth * 100:+.2f}% over the second half), "
          f"idle after {rss['idle'] / 1024:.1f} MiB")
    blocks = {n: prom.value(after, f"tinfer:kv_cache_{n}_blocks")
              for n in ("total", "sequence", "prefix_only", "free")}
    print(f"  KV pool after: {blocks}")

    def expect(condition, message):
        if not condition:
            failures.append(message)

    expect(stuck == 0, f"{stuck} clients never finished")
    expect(len(outcomes.by_request) == index,
           f"{index - len(outcomes.by_request)} requests have no outcome")
    expect(not outcomes.problems, f"{len(outcomes.problems)} problems: {outcomes.problems[:8]}")
    expect(kinds["ok_stream"] > 0 and kinds["ok_json"] > 0 and
           kinds["context_length_exceeded"] > 0 and kinds["client_hangup_streaming"] > 0 and
           kinds["client_hangup_waiting"] > 0, f"a kind of traffic never happened: {kinds}")
    expect(sum(ended.values()) == delta["tinfer:request_submitted_total"],
           f"engine requests ended {sum(ended.values()):.0f} times, "
           f"{delta['tinfer:request_submitted_total']:.0f} submitted")
    expect(ended["abort"] > 0, "no hang-up was aborted")
    for name in ("tinfer:num_requests_running", "tinfer:num_requests_waiting",
                 "tinfer:num_requests_live", "tinfer:num_requests_admitted"):
        expect(prom.value(after, name) == 0, f"after the soak {name} = {prom.value(after, name)}")
    expect(blocks["sequence"] == 0 and blocks["prefix_only"] + blocks["free"] == blocks["total"],
           f"the KV pool is not back to idle: {blocks}")
    expect(delta["tinfer:num_preemptions_total"] > 0, "the KV budget forced no preemption")
    expect(growth < 0.05, f"VmRSS grew {growth * 100:.2f}% across the second half")
    for f in failures:
        print(f"FAIL: {f}")
    if failures:
        print("  the server said:\n    " + "\n    ".join(server_log[-20:]))
    print("FAILED" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
