#!/usr/bin/env python3
"""The generate CLI as a user runs it, on SmolLM2 with greedy decoding and few tokens:

- --interactive reads user turns from piped stdin, answers each, keeps the conversation (the
  second turn's prompt holds the first turn and its reply, and the KV cache's copy of the first
  turn is reused, not prefilled again) and exits 0 at EOF;
- -f reads the prompt from a file (the same answer as --prompt with that text);
- --chat-template FILE is the template used (a template that raises fails the run with its
  message; one with an unsupported construct is refused naming it; a built-in by name works);
- -c bounds the context (a prompt past it is refused, naming the size);
- the penalties reach the sampler (a strong presence penalty changes a repetitive greedy
  answer; an invalid one is refused naming the field).
Exit 77 (skipped) when the program or the model is missing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 120  # a run that does not end at EOF fails here instead of hanging


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--generate", required=True)
    parser.add_argument("--model", required=True)
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
    # More than the whole first prompt is reused: the first reply's tokens are in the second
    # turn's prompt, and the cache's copy of them is kept.
    check(len(reused) == 2 and reused[0] == 0 and reused[1] > prompts[0],
          f"the second turn prefills only what the cache lacks (reused {reused} of {prompts})")

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

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
