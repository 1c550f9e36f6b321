#!/usr/bin/env python3
"""serve --tp 2 and --pp 2 end to end: two ranks under mpirun against one process, over loopback.

  python3 tests/server/test_tensor_parallel.py --server build/examples/serve \
      --mpirun mpirun --model gemma-3-270m.gguf --smollm2 SmolLM2.gguf

One `serve` (TP 1) answers a few greedy chat completions, with the top-2 log-probabilities of
every token. Then `mpirun -n 2 serve --tp 2 --speculative-tokens 3` (rank 0 serves HTTP, rank 1
follows its steps) answers the same requests, two at once (batched; the second shares the
first's system prompt: a prefix-cache hit), one streamed and one not, and every answer must
be TP 1's, token for token, or first differ where TP 1's top-2 log-probability margin is a
near-tie (below NEAR_TIE, reported). Speculative decoding by prompt lookup runs under TP here
(greedy output is unchanged by it). SIGTERM to rank 0 must end the whole job (rank 1 told to
stop, not killed) with exit status 0 within STOP_SECONDS. Refusals: --tp 2 on SmolLM2 (9
heads) and --tp 2 on one rank end with a message naming the problem, without hanging.

Then `mpirun -n 2 serve --pp 2 --micro-batches 2 --speculative-tokens 3` on SmolLM2 (30 layers,
15 a stage; rank 0 serves HTTP and computes stage 0, rank 1 stage 1) answers the same questions
two at once (one streamed) and every answer must equal one SmolLM2 process's exactly: a stage
boundary moves floats unchanged and the forward pass is batch invariant, so there is no
near-tie allowance here. A request with a grammar (response_format json_object) is refused with
400 under --pp; SIGTERM to rank 0 ends both ranks. Refusals: --pp 2 on Gemma 3 (18 layers, a
global layer every 6th: no equal stages of one pattern), --pp with --tp, with --role and with
--kv-cache-dtype int8.
Exit codes: 0 pass, 1 fail, 77 skipped (no model, server or mpirun; under CI=true: 1).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_openai_clients import Server, check, http_request, metrics, missing  # noqa: E402

# Log-probability gap under which TP 2 may pick the runner-up: its logits differ from TP 1's by
# the reordered sums of the all-reduce (tests/model: within 2e-3 * max|logit|, a few 1e-2 for
# Gemma's logits), so a flip needs a gap below twice that.
NEAR_TIE = 0.1
STOP_SECONDS = 30
MAX_TOKENS = 12
SYSTEM = ("You are a concise assistant. Answer in one short sentence, without lists, "
          "and do not repeat the question.")
QUESTIONS = ["What is the capital of France?", "Why is the sky blue?"]


def chat_body(question, stream, logprobs):
    body = {"model": "tinfer", "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": question}]}
    if logprobs:
        body.update({"logprobs": True, "top_logprobs": 2})
    return body


def answer(port, body):
    """(text, [(token text, top-2 margin or None)]) of a chat completion, streamed or not."""
    if not body["stream"]:
        status, _, raw = http_request(port, "POST", "/v1/chat/completions", body, timeout=300)
        check(status == 200, f"status {status}: {raw[:300]}")
        choice = json.loads(raw)["choices"][0]
        return choice["message"]["content"], margins_of(choice.get("logprobs"))
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:  # the message reads the body: only when it is an error
        check(False, f"stream status {response.status}: {response.read()[:300]}")
    text, done = "", False
    for raw in response:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            done = True
            break
        if line.startswith("data: "):
            for choice in json.loads(line[6:])["choices"]:
                text += choice.get("delta", {}).get("content") or ""
    connection.close()
    check(done, "the stream ended without [DONE]")
    return text, []


def margins_of(logprobs):
    out = []
    for entry in (logprobs or {}).get("content") or []:
        top = entry.get("top_logprobs") or []
        margin = top[0]["logprob"] - top[1]["logprob"] if len(top) >= 2 else None
        out.append((entry["token"], margin))
    return out


def compare(reference, got, what):
    """Equal, or the first differing character falls in a token of TP 1 at a near-tie."""
    text, tokens = reference
    if got == text:
        return "equal"
    common = 0
    while common < min(len(got), len(text)) and got[common] == text[common]:
        common += 1
    at = 0
    for token, margin in tokens:
        if at + len(token) > common:
            check(margin is not None and margin < NEAR_TIE,
                  f"{what}: TP 2 answered {got!r}, TP 1 {text!r}; they part at token {token!r} "
                  f"whose TP 1 top-2 margin {margin} is no near-tie")
            return f"near-tie at {token!r} (margin {margin:.4f})"
        at += len(token)
    check(False, f"{what}: TP 2 answered {got!r}, TP 1 {text!r}")


class TensorParallelServer(Server):
    """mpirun -n RANKS serve --tp RANKS ... (or --pp); rank 0's pid from its start-up line."""

    def __init__(self, mpirun, ranks, binary, model, *extra, split="--tp"):
        super().__init__(binary, model, split, str(ranks), *extra)
        self.command = [mpirun, "--oversubscribe", "--allow-run-as-root", "-n", str(ranks),
                        "-x", "OMP_NUM_THREADS=1", *self.command]

    def rank0_pid(self):
        for line in self.output:
            match = re.search(r"rank 0 \(pid (\d+)\) serves HTTP", line)
            if match:
                return int(match.group(1))
        check(False, "rank 0 did not print its pid:\n" + "\n".join(self.output))

    def stop_through_rank0(self):
        """SIGTERM to rank 0 alone: the job must end by itself, cleanly and in time."""
        os.kill(self.rank0_pid(), signal.SIGTERM)
        try:
            code = self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            check(False, f"the job did not end within {STOP_SECONDS} s of SIGTERM to rank 0:\n"
                  + "\n".join(self.output[-20:]))
        time.sleep(0.2)  # the output thread drains the last lines
        check(code == 0, f"mpirun exited {code}:\n" + "\n".join(self.output[-20:]))
        check(any("serve: stopped" in line for line in self.output), "rank 0 did not stop")


def refused(command, expected, what):
    """A start that must fail at once, naming the problem."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: still running after 120 s (a refusal must not hang)")
    output = done.stdout + done.stderr
    check(done.returncode != 0 and expected in output,
          f"{what}: exit {done.returncode}, expected a message with {expected!r}:\n{output[-1500:]}")


def ask_concurrently(port, what):
    """Every question at once (question 0 streamed); the answers' texts."""
    results = [None] * len(QUESTIONS)
    errors = []

    def ask(i):
        try:
            results[i] = answer(port, chat_body(QUESTIONS[i], stream=i == 0, logprobs=False))[0]
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(QUESTIONS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    check(not errors, f"{what} requests failed: {errors}")
    check(all(r is not None for r in results), f"a {what} request did not finish in 300 s")
    return results


def pipeline_parallel(args, mpirun, common):
    """serve --pp 2 on SmolLM2 against one SmolLM2 process: the same greedy answers, exactly."""
    with Server(args.server, args.smollm2, *common) as one:
        references = [answer(one.port, chat_body(q, stream=False, logprobs=False))[0]
                      for q in QUESTIONS]
    print(f"one process (SmolLM2): {references}")
    check(all(r.strip() for r in references), f"empty reference answers: {references}")
    with TensorParallelServer(mpirun, 2, args.server, args.smollm2, *common, "--micro-batches",
                              "2", "--speculative-tokens", "3", split="--pp") as two:
        check(any("pipeline parallel over 2 stages (2 micro-batches)" in line
                  for line in two.output), "rank 0 did not say it runs 2 pipeline stages")
        results = ask_concurrently(two.port, "PP 2")
        for i, got in enumerate(results):
            check(got == references[i],
                  f"PP 2 question {i}: answered {got!r}, one process {references[i]!r}")
        print(f"PP 2 answers equal one process's: {results}")
        body = chat_body(QUESTIONS[0], stream=False, logprobs=False)
        body["response_format"] = {"type": "json_object"}
        status, _, raw = http_request(two.port, "POST", "/v1/chat/completions", body, timeout=60)
        check(status == 400 and b"grammar" in raw,
              f"a grammar request under --pp must be refused with 400: {status} {raw[:300]}")
        two.stop_through_rank0()
    run_two = [mpirun, "--oversubscribe", "--allow-run-as-root", "-n", "2", args.server,
               "--port", "0"]
    refused(run_two + ["--model", args.model, "--pp", "2"], "split into equal stages",
            "--pp 2 on Gemma 3")
    refused(run_two + ["--model", args.smollm2, "--pp", "2", "--tp", "2"],
            "--tp and --pp cannot be combined", "--pp with --tp")
    refused(run_two + ["--model", args.smollm2, "--pp", "2", "--role", "prefill"],
            "--pp and --role cannot be combined", "--pp with --role")
    refused(run_two + ["--model", args.smollm2, "--pp", "2", "--kv-cache-dtype", "int8"],
            "not supported under --pp", "--pp with --kv-cache-dtype int8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="", help="path to the serve program")
    parser.add_argument("--mpirun", default="", help="mpirun (mpiexec) of the MPI serve links")
    parser.add_argument("--model", required=True, help="a GGUF that splits 2 ways (Gemma 3)")
    parser.add_argument("--smollm2", default="", help="SmolLM2 GGUF (9 heads: --tp 2 refused)")
    parser.add_argument("--threads", default="1", help="engine threads per rank")
    args = parser.parse_args()
    if not args.server or not os.access(args.server, os.X_OK):
        return missing(f"no serve program at {args.server!r}")
    if not os.path.exists(args.model):
        return missing(f"no model at {args.model}")
    mpirun = args.mpirun or shutil.which("mpirun")
    if not mpirun:
        return missing("no mpirun (scripts/setup.sh installs openmpi-bin)")
    started = time.time()
    common = ("--threads", args.threads, "--precision", "f32", "--served-model-name", "tinfer")

    references = []
    with Server(args.server, args.model, *common) as one:
        for i, q in enumerate(QUESTIONS):
            references.append(answer(one.port, chat_body(q, stream=False, logprobs=True)))
    print(f"TP 1 answers: {[r[0] for r in references]}")

    with TensorParallelServer(mpirun, 2, args.server, args.model, *common,
                              "--speculative-tokens", "3") as two:
        results = ask_concurrently(two.port, "TP 2")
        for i, got in enumerate(results):
            verdict = compare(references[i], got,
                              f"question {i} ({'stream' if i == 0 else 'not streamed'})")
            print(f"TP 2 question {i}: {verdict}")
        accepted = [v for k, v in metrics(two.port).items()
                    if "spec_decode_num_accepted_tokens_total" in k]
        check(accepted and accepted[0] > 0, f"no draft token accepted under TP: {accepted}")
        print(f"TP 2: {accepted[0]:.0f} draft tokens accepted")
        two.stop_through_rank0()

    refused([mpirun, "--oversubscribe", "--allow-run-as-root", "-n", "1", args.server,
             "--model", args.model, "--port", "0", "--tp", "2"], "needs as many MPI ranks",
            "--tp 2 on one rank")
    if args.smollm2 and os.path.exists(args.smollm2):
        refused([mpirun, "--oversubscribe", "--allow-run-as-root", "-n", "2", args.server,
                 "--model", args.smollm2, "--port", "0", "--tp", "2"], "split evenly over 3",
                "--tp 2 on SmolLM2")
    if args.smollm2 and os.path.exists(args.smollm2):
        pipeline_parallel(args, mpirun, common)
    else:
        print("serve --pp 2: not run (no SmolLM2 model given with --smollm2)")
    print(f"PASS serve --tp 2 and --pp 2 in {time.time() - started:.1f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAILED: {e}")
        sys.exit(1)
