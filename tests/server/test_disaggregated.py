#!/usr/bin/env python3
"""serve --role prefill|decode under one mpirun answers as plain serve does.

  python3 tests/server/test_disaggregated.py --server build/examples/serve --model M.gguf \
      --mpiexec mpiexec

First a plain serve answers a few greedy chat completions (the reference); then one mpirun
starts serve twice, rank 0 with --role prefill (HTTP on a loopback port, hands each request
off after its first token) and rank 1 with --role decode. The same requests, non-streamed,
streamed and several at once, must get the same text, finish reason and token counts; the
streamed deltas must join to the whole answer. SIGTERM to the prefill rank stops both ranks
cleanly (mpirun exits 0, each rank prints "serve: stopped").
Exit codes: 0 pass, 1 fail, 77 skipped (no model, serve or mpiexec; under CI=true: 1).
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_openai_clients import (Server, check, http_request, missing,  # noqa: E402
                                 missing_server_or_model)

QUESTIONS = [
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "List three colors.",
    "Explain what a compiler does in two sentences.",
]


def body_for(question, stream=False):
    return {"model": "m", "messages": [{"role": "user", "content": question}],
            "max_tokens": 24, "temperature": 0, "stream": stream}


def ask(port, question):
    status, _, raw = http_request(port, "POST", "/v1/chat/completions", body_for(question),
                                  timeout=120)
    check(status == 200, f"{question!r}: status {status}: {raw[:200]}")
    answer = json.loads(raw)
    choice = answer["choices"][0]
    return {"text": choice["message"]["content"], "finish": choice["finish_reason"],
            "tokens": answer["usage"]["completion_tokens"]}


def ask_streamed(port, question):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("POST", "/v1/chat/completions", body=json.dumps(body_for(question, True)),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    check(response.status == 200, f"stream {question!r}: status {response.status}")
    text, finish, chunks, done = "", None, 0, False
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        for choice in json.loads(line[len("data: "):])["choices"]:
            delta = choice.get("delta", {}).get("content")
            if delta:
                text += delta
                chunks += 1
            finish = choice.get("finish_reason") or finish
    connection.close()
    check(done, f"stream {question!r}: no [DONE]")
    return {"text": text, "finish": finish, "chunks": chunks}


def same(got, want, what):
    check(got["text"] == want["text"] and got["finish"] == want["finish"],
          f"{what}: disaggregated {got!r}, plain serve {want!r}")


class MpiServe(Server):
    """One mpirun: rank 0 serve --role prefill (HTTP), rank 1 serve --role decode."""

    def __init__(self, mpiexec, binary, model, threads, decode_args=()):
        super().__init__(binary, model)
        common = ["--model", model, "--threads", threads, "--served-model-name", "m"]
        self.command = [mpiexec, "--oversubscribe", "--allow-run-as-root",
                        "-n", "1", binary, "--role", "prefill", *common,
                        "--host", "127.0.0.1", "--port", "0", ":",
                        "-n", "1", binary, "--role", "decode", *common, *decode_args]

    def prefill_rank_pid(self):
        """mpirun's child started with --role prefill (Open MPI forks local ranks itself)."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if parent == self.process.pid and b"prefill" in argv:
                return int(entry)
        return None

    def stop(self):
        """SIGTERM to the prefill rank, as a process manager stops the server: it stops the
        decode rank itself, and mpirun then exits with the ranks' status."""
        pid = self.prefill_rank_pid()
        check(pid is not None, "no prefill rank among mpirun's children")
        os.kill(pid, signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="", help="path to the serve program")
    parser.add_argument("--model", required=True, help="GGUF model file")
    parser.add_argument("--mpiexec", default="mpiexec", help="MPI launcher")
    parser.add_argument("--threads", default="1", help="engine threads per rank")
    parser.add_argument("--decode-args", default="",
                        help="extra flags for the decode rank only (e.g. '--kv-cache-dtype bf16', "
                             "which must make the test fail: the ranks' caches then disagree)")
    args = parser.parse_args()
    code = missing_server_or_model(args)
    if code is not None:
        return code
    if not shutil.which(args.mpiexec):
        return missing(f"no MPI launcher {args.mpiexec!r} (scripts/setup.sh: openmpi-bin)")

    started = time.time()
    with Server(args.server, args.model, "--threads", args.threads,
                "--served-model-name", "m") as plain:
        reference = {q: ask(plain.port, q) for q in QUESTIONS}
    print(f"reference from plain serve: {time.time() - started:.1f} s", flush=True)

    server = MpiServe(args.mpiexec, args.server, args.model, args.threads,
                      args.decode_args.split())
    with server:
        port = server.port
        check(http_request(port, "GET", "/health")[0] == 200, "/health on the prefill rank")
        for q in QUESTIONS[:2]:
            got = ask(port, q)
            same(got, reference[q], f"non-streamed {q!r}")
            check(got["tokens"] == reference[q]["tokens"], f"{q!r}: completion_tokens")
            check(got["tokens"] >= 2, f"{q!r}: at least one token came from the decode rank")
        for q in QUESTIONS[1:3]:
            got = ask_streamed(port, q)
            same(got, reference[q], f"streamed {q!r}")
            check(got["chunks"] >= 2, f"streamed {q!r}: the text came in {got['chunks']} chunks")
        # Several at once: the decode rank batches them.
        answers, errors = {}, []

        def one(q):
            try:
                answers[q] = ask(port, q)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{q!r}: {e}")
        threads = [threading.Thread(target=one, args=(q,)) for q in QUESTIONS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        check(not errors, "concurrent requests failed: " + "; ".join(errors))
        for q in QUESTIONS:
            same(answers[q], reference[q], f"concurrent {q!r}")
        code = server.stop()
        time.sleep(0.5)  # the output reader drains the last lines
        stopped = sum("serve: stopped" in line for line in server.output)
        check(code == 0 and stopped == 2,
              f"mpirun exited {code}, {stopped} of 2 ranks said 'serve: stopped':\n" +
              "\n".join(server.output[-20:]))
    print(f"disaggregated serve matched plain serve ({len(QUESTIONS)} questions, streamed, "
          f"non-streamed, concurrent) in {time.time() - started:.1f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAIL {e}")
        sys.exit(1)
