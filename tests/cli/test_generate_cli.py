#!/usr/bin/env python3
"""The generate CLI as a user runs it, on SmolLM2 with greedy decoding and few tokens:

- --interactive reads user turns from piped stdin, answers each, keeps the conversation (the
  second turn's prompt holds the first turn and its reply, and the engine's prefix cache serves
  the first turn's KV, in whole blocks of 16 positions, instead of prefilling it again) and
  exits 0 at EOF;
- -f reads the prompt from a file (the same answer as --prompt with that text);
- --chat-template FILE is the template used (a template that raises fails the run with its
  message; one with an unsupported construct is refused naming it; a built-in by name works);
- -c bounds the context (a prompt past it is refused, naming the size);
- the penalties reach the sampler (a strong presence penalty changes a repetitive greedy
  answer; an invalid one is refused naming the field);
- --speculative-tokens 4 (prompt lookup) gives the greedy answer without it, with drafts
  accepted; --draft-model (the model drafting for itself) gives that answer too, nearly every
  draft kept, and is refused without --speculative-tokens; --kv-cache-dtype int8 runs and
  answers; an unknown dtype is refused naming the flag and the pairs;
- --max-tokens 0 and --threads -2 are refused saying the floor; --system and --chat-template
  without --chat or --interactive are refused (they would be dropped in silence);
- the timing report (TTFT, TPOT, prefill and decode tokens/s) is on stderr;
- --device cuda: what the CUDA backend lacks (--kv-cache-dtype int8, --precision int8) is
  refused naming the flag before anything loads; otherwise it answers greedily as the CPU does
  where a GPU exists, and is refused with one clear line (no CUDA backend in this build, or no
  CUDA device on this machine) where none does; an unknown device is refused;
- with --mpirun: `mpirun -n 2 generate --pp 2` (each rank's engine over 15 of SmolLM2's 30
  layers, in lockstep) prints one process's greedy answer exactly (a stage boundary moves floats
  unchanged), and `mpirun -n 3 generate --tp 3` runs and answers; --pp with --kv-cache-dtype
  int8 is refused naming both.
Exit 77 (skipped) when the program or the model is missing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 120  # a run that does not end at EOF fails here instead of hanging
KV_BLOCK = 16  # positions per KV block of generate's engine (PagedKv<16, ...>)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--generate", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--mpirun", default="", help="mpirun, for the --tp / --pp cases")
    args = parser.parse_args()
    if not args.generate or not os.path.exists(args.generate):
        print("SKIP: the generate program was not built")
        return 77
    if not os.path.exists(args.model):
        print(f"SKIP: no model at {args.model}")
        return 77

    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    def run(*flags, stdin=None):
        command = [args.generate, "--model", args.model, "--threads", "2", "--temperature", "0",
                   *flags]
        done = subprocess.run(command, input=stdin, capture_output=True, text=True,
                              timeout=TIMEOUT)
        return done.returncode, done.stdout, done.stderr

    # Interactive: two turns from a pipe, then EOF.
    code, out, err = run("-i", "-c", "512", "--max-tokens", "6",
                         stdin="What is the capital of France?\n\nAnd of Italy?\n")
    prompts = [int(n) for n in re.findall(r"prompt tokens (\d+)", err)]
    check(code == 0, f"--interactive exits 0 at EOF (got {code}: {err[-300:]!r})")
    check(len(prompts) == 2, f"two non-empty stdin lines give two replies (got {prompts})")
    check(len(out.strip().splitlines()) >= 1, "the replies are printed")
    check(len(prompts) == 2 and prompts[1] > prompts[0] + 6,
          f"the second turn's prompt holds the first turn and its reply ({prompts})")
    reused = [int(n) for n in re.findall(r"\((\d+) reused from the KV cache\)", err)]
    # The prefix cache keeps whole KV blocks of the first turn (its prompt and reply, all but
    # the last token): the second turn reuses at least the first prompt's whole blocks.
    check(len(reused) == 2 and reused[0] == 0 and reused[1] > 0
          and reused[1] >= prompts[0] // KV_BLOCK * KV_BLOCK,
          f"the second turn prefills only what the cache lacks (reused {reused} of {prompts})")
    if len(reused) == 2 and len(prompts) == 2:
        print(f"     turn 1 prefilled {prompts[0] - reused[0]} of {prompts[0]} prompt tokens, "
              f"turn 2 {prompts[1] - reused[1]} of {prompts[1]}")

    # -f: the prompt from a file answers as --prompt does.
    with tempfile.TemporaryDirectory() as folder:
        prompt_file = os.path.join(folder, "prompt.txt")
        with open(prompt_file, "w") as f:
            f.write("The three primary colors are")
        code_f, out_f, err_f = run("-f", prompt_file, "--max-tokens", "6")
        code_p, out_p, _ = run("--prompt", "The three primary colors are", "--max-tokens", "6")
        check(code_f == 0 and code_p == 0 and out_f == out_p and out_f.strip(),
              f"-f FILE answers as --prompt (got {out_f!r} / {out_p!r}: {err_f[-200:]!r})")

        # --chat-template FILE: the file is what renders the conversation.
        raising = os.path.join(folder, "raising.jinja")
        with open(raising, "w") as f:
            f.write("{{ raise_exception('custom template says ' ~ messages[0].content) }}")
        code, _, err = run("--chat", "--prompt", "hello", "--chat-template", raising)
        check(code == 1 and "chat template raised: custom template says hello" in err,
              f"--chat-template FILE renders the chat (got {code}: {err[-200:]!r})")
        macro = os.path.join(folder, "macro.jinja")
        with open(macro, "w") as f:
            f.write("{% macro turn(m) %}{{ m.content }}{% endmacro %}")
        code, _, err = run("--chat", "--prompt", "hello", "--chat-template", macro)
        check(code == 1 and "unsupported Jinja construct '{% macro %}'" in err,
              f"an unsupported template is refused, naming the construct ({err[-200:]!r})")
        code, out, err = run("--chat", "--prompt", "hello", "--chat-template", "chatml",
                             "--max-tokens", "4")
        default_code, default_out, default_err = run("--chat", "--prompt", "hello",
                                                     "--max-tokens", "4")
        chatml_prompt = re.findall(r"prompt tokens (\d+)", err)
        default_prompt = re.findall(r"prompt tokens (\d+)", default_err)
        # The built-in ChatML has no default system message; SmolLM2's own template adds one.
        check(code == 0 and default_code == 0 and chatml_prompt and default_prompt
              and int(chatml_prompt[0]) < int(default_prompt[0]),
              f"--chat-template chatml replaces the file's template ({chatml_prompt} vs "
              f"{default_prompt})")

    # -c: the context bounds the prompt.
    code, _, err = run("--prompt", "one two three four five six seven eight nine ten", "-c", "4")
    check(code == 1 and "the context holds 4" in err, f"-c bounds the context ({err[-200:]!r})")

    # Penalties reach the sampler.
    repetitive = "Repeat after me: the cat the cat the cat the cat the cat the cat"
    _, plain, _ = run("--prompt", repetitive, "--max-tokens", "12")
    _, penalised, _ = run("--prompt", repetitive, "--max-tokens", "12", "--presence-penalty", "20")
    check(plain.strip() and penalised.strip() and plain != penalised,
          f"--presence-penalty changes a repetitive answer ({plain!r} vs {penalised!r})")
    code, _, err = run("--prompt", "x", "--repeat-penalty", "0")
    check(code == 1 and "repetition_penalty" in err,
          f"an invalid penalty is refused naming it ({err[-200:]!r})")

    # The timing report, from the engine's metrics.
    check(all(re.search(pattern, err_f) for pattern in
              (r"TTFT [\d.]+ ms, TPOT [\d.]+ ms", r"prefill [\d.]+ tokens/s, decode [\d.]+ tokens/s")),
          f"the timing report is on stderr ({err_f[-300:]!r})")

    # Prompt-lookup speculation leaves greedy output as it is, and lands drafts on a prompt
    # whose answer repeats it.
    counting = "Count: one two three four five six seven one two three four five six seven one"
    code_plain, out_plain, _ = run("--prompt", counting, "--max-tokens", "16")
    code_spec, out_spec, err_spec = run("--prompt", counting, "--max-tokens", "16",
                                        "--speculative-tokens", "4")
    accepted = re.findall(r"speculative decoding: (\d+) of (\d+) draft tokens accepted", err_spec)
    check(code_plain == 0 and code_spec == 0 and out_plain.strip() and out_spec == out_plain,
          f"--speculative-tokens 4 gives the greedy answer ({out_spec!r} vs {out_plain!r})")
    check(accepted and int(accepted[0][0]) > 0,
          f"--speculative-tokens 4 accepts drafts ({accepted}: {err_spec[-300:]!r})")

    # --draft-model: the model drafting for itself gives the same answer, nearly every draft
    # kept (batch-invariant greedy passes); without --speculative-tokens it is refused.
    code_draft, out_draft, err_draft = run("--prompt", counting, "--max-tokens", "16",
                                           "--speculative-tokens", "4", "--draft-model",
                                           args.model)
    accepted = re.findall(r"speculative decoding: (\d+) of (\d+) draft tokens accepted",
                          err_draft)
    check(code_draft == 0 and out_draft == out_plain,
          f"--draft-model gives the greedy answer ({out_draft!r} vs {out_plain!r}: "
          f"{err_draft[-300:]!r})")
    check(accepted and int(accepted[0][0]) >= 0.9 * int(accepted[0][1]) > 0,
          f"--draft-model (itself) keeps nearly every draft ({accepted})")
    code, _, err = run("--prompt", "x", "--draft-model", args.model)
    check(code != 0 and "--draft-model needs --speculative-tokens" in err,
          f"--draft-model without --speculative-tokens is refused ({code}: {err[-200:]!r})")

    # --kv-cache-dtype: a compiled-in pair runs and answers; an unknown one is refused by name.
    code, out, err = run("--prompt", "The capital of France is", "--max-tokens", "6",
                         "--kv-cache-dtype", "int8")
    check(code == 0 and out.strip() and "KV int8" in err,
          f"--kv-cache-dtype int8 answers ({code}: {out!r} {err[-200:]!r})")
    code, _, err = run("--prompt", "x", "--kv-cache-dtype", "int3")
    check(code != 0 and "--kv-cache-dtype: int3 is not one of fp32 | " in err
          and "| int8,int4" in err,
          f"an unknown KV dtype is refused naming the flag and the pairs ({code}: {err[-200:]!r})")

    # Counts below their floor are refused saying the floor; chat-only flags need a chat.
    for flags, said in ((("--max-tokens", "0"), "--max-tokens: must be at least 1, got 0"),
                        (("--threads", "-2"), "--threads: must be 0 or more, got -2"),
                        (("--system", "Be brief."),
                         "--system applies to a chat: add --chat or --interactive"),
                        (("--chat-template", "chatml"),
                         "--chat-template applies to a chat: add --chat or --interactive")):
        code, _, err = run("--prompt", "x", *flags)
        check(code != 0 and said in err, f"{' '.join(flags)} is refused: {said!r} ({code}: "
              f"{err[-200:]!r})")

    # --device cuda.
    for flags, named in ((("--kv-cache-dtype", "int8"), "--kv-cache-dtype int8"),
                         (("--precision", "int8"), "--precision int8")):
        code, _, err = run("--prompt", "x", "--device", "cuda", *flags)
        check(code == 1 and f"--device cuda: {named} is not implemented on the CUDA backend"
              in err, f"--device cuda refuses {named} naming it ({code}: {err[-200:]!r})")
    code, out, err = run("--prompt", "The capital of France is", "--max-tokens", "6",
                         "--precision", "f32")
    cpu_answer = out.strip()
    code, out, err = run("--prompt", "The capital of France is", "--max-tokens", "6",
                         "--device", "cuda")
    unavailable = ("--device cuda: this build has no CUDA backend" in err or
                   "--device cuda: this machine has no CUDA device" in err)
    if code == 0:
        check(out.strip() == cpu_answer,
              f"--device cuda answers as the CPU (f32) does ({out!r} vs {cpu_answer!r})")
    else:
        check(code == 1 and unavailable and err.strip().count("\n") == 0,
              f"--device cuda without a GPU: one clear line ({code}: {err[-300:]!r})")
    code, _, err = run("--prompt", "x", "--device", "tpu")
    check(code != 0 and "--device" in err, f"an unknown device is refused ({code}: {err[-200:]!r})")

    if args.mpirun:
        mpirun = [args.mpirun, "--oversubscribe", "--allow-run-as-root", "-x", "OMP_NUM_THREADS=1"]
        question = ["--prompt", "The capital of France is", "--max-tokens", "8"]
        code_one, out_one, _ = run(*question)

        def ranks(n, *flags):
            command = [*mpirun, "-n", str(n), args.generate, "--model", args.model,
                       "--threads", "1", "--temperature", "0", *flags]
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
            return done.returncode, done.stdout, done.stderr

        code, out, err = ranks(2, *question, "--pp", "2", "--micro-batches", "2")
        check(code_one == 0 and code == 0 and out_one.strip() and out == out_one
              and "pipeline parallel 2" in err,
              f"--pp 2 prints one process's answer ({out!r} vs {out_one!r}: {err[-300:]!r})")
        code, out, err = ranks(3, *question, "--tp", "3")
        check(code == 0 and out.strip() and "tensor parallel 3" in err,
              f"--tp 3 answers ({code}: {out!r} {err[-300:]!r})")
        code, _, err = ranks(2, *question, "--pp", "2", "--kv-cache-dtype", "int8")
        check(code != 0 and "--kv-cache-dtype int8 is not supported under --pp" in err,
              f"--pp with --kv-cache-dtype int8 is refused ({code}: {err[-300:]!r})")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
