#!/usr/bin/env python3
"""Nothing silently ignored, and what operators expect, against the real model over loopback.

  python3 tests/server/test_openai_parameters.py --server build/examples/serve --model M.gguf

  - every parameter the installed `openai` client's chat.completions.create() and
    completions.create() accept (read from their signatures with `inspect`; the version is
    printed) is either honoured, with an observable effect, or refused with a 400 naming it; a
    parameter the table below does not classify fails the test, so a client upgrade that adds
    one cannot slip through unclassified. Unknown top-level fields are refused by name too.
  - response_format json_object and json_schema (chat, and completions through extra_body) and
    llama-server's "grammar" field are honoured: every output that stops parses, and validates
    against its schema with the `jsonschema` package (skipped without it, failed under
    CI=true); a schema keyword outside the compiler's subset is a 400 naming it; a repeated
    schema is compiled once (tinfer:structured_output_compilations_total);
  - /tokenize and /detokenize in vLLM's shapes (count, max_model_len; a round trip; the counts
    equal the generation endpoints' usage), and their hostile bodies;
  - a client that disconnects mid-stream (the official client's stream closed after two
    chunks): its sequence is aborted and its KV blocks go back to the pool
    (tinfer:kv_cache_sequence_blocks back to 0, having been above 0 while it streamed);
  - a second server with --api-key, --speculative-tokens, --no-enable-prefix-caching and
    --max-model-len: 401 without the key (constant-time compare; /health and /metrics stay
    open), the client with the key works; drafts are proposed and accepted and greedy output
    is unchanged; no prefix-cache hits; the shorter context is offered and enforced. Servers
    with each compiled --kv-cache-dtype pair serve and fit as many more blocks in one budget
    as their codecs are smaller. A server with --draft-model (the model drafting for itself):
    drafts proposed and nearly all kept, greedy output unchanged. A --speculative-tokens past
    its range, a codec pair not compiled in, and --draft-model without --speculative-tokens,
    with a KV codec other than fp32, or of another shape (--other-model, Gemma 3), are refused
    at start-up naming the flag.
Exit codes: 0 pass, 1 fail, 77 skipped (as test_openai_clients.py).
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_openai_clients import (Server, check, expect_error, http_request, metrics,  # noqa: E402
                                 missing, missing_server_or_model, wait_for_metrics)

failures = []
# A schema whose every output is short (bounded strings, an enum, at most 3 items), so sampled
# answers end with "stop" well within max_tokens.
PERSON_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "fruit": {"enum": ["apple", "banana", "cherry"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
    "required": ["name", "age", "fruit"]}
JSON_MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]
MESSAGES = [{"role": "user", "content": "Write a list of fruits, one per line."}]
PROMPT = "The list of fruits: apple, banana,"


def create_parameters():
    """The names each create() takes, less the transport's own."""
    from openai.resources.chat.completions import Completions as Chat
    from openai.resources.completions import Completions
    transport = {"self", "extra_headers", "extra_query", "extra_body", "timeout"}

    def names(f):
        return [p for p in inspect.signature(f).parameters if p not in transport]
    return names(Chat.create), names(Completions.create)


def refused(call, name, **kwargs):
    """The call is a 400 whose error names `name`."""
    import openai
    try:
        call(**kwargs)
    except openai.BadRequestError as e:
        param = (e.body or {}).get("param") if isinstance(e.body, dict) else None
        check(param == name, f"{name}: refused naming {param!r}: {e}")
        return
    check(False, f"{name}={kwargs} accepted: it must be honoured or refused")


class Calls:
    """Greedy and sampled calls on both endpoints, with the server's model."""

    def __init__(self, server, client):
        self.server, self.client, self.model = server, client, server.model_name

    def chat(self, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("messages", MESSAGES)
        if "max_completion_tokens" not in kw:
            kw.setdefault("max_tokens", 8)
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(**kw)

    def comp(self, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("prompt", PROMPT)
        kw.setdefault("max_tokens", 8)
        kw.setdefault("temperature", 0)
        return self.client.completions.create(**kw)

    def chat_text(self, **kw):
        return self.chat(**kw).choices[0].message.content

    def comp_text(self, **kw):
        return self.comp(**kw).choices[0].text


def first_token(calls, endpoint):
    """The greedy first token's id (through /tokenize of its text is ambiguous: logprobs)."""
    if endpoint == "chat":
        r = calls.chat(max_tokens=1, logprobs=True)
        text = r.choices[0].logprobs.content[0].token
    else:
        r = calls.comp(max_tokens=1, logprobs=0)
        text = r.choices[0].logprobs.tokens[0]
    status, _, body = http_request(calls.server.port, "POST", "/tokenize",
                                   {"prompt": text, "add_special_tokens": False})
    tokens = json.loads(body)["tokens"]
    check(status == 200 and len(tokens) == 1, f"first token {text!r} -> {tokens}")
    return tokens[0]


# Each parameter's check: it runs the parameter and asserts its effect (honoured) or its 400.
def shared_checks(calls, call, text, endpoint):
    greedy = text()
    long_greedy = text(max_tokens=16)

    def penalty(name):
        def run():
            # A negative penalty rewards repeating what was generated: greedily, a list turns
            # into one word over and over ("grape, grape, ..."), where +2 may not overturn a
            # confident model within 16 tokens.
            changed = text(max_tokens=16, **{name: -2.0})
            check(changed != long_greedy, f"{name}=-2 changed nothing: {changed!r}")
        return run

    def logit_bias():
        banned = first_token(calls, endpoint)
        out = text(max_tokens=1, logit_bias={str(banned): -100})
        check(out != text(max_tokens=1), f"banning token {banned} left {out!r}")
        # +100 on one token makes it every token.
        port = calls.server.port
        forced = json.loads(http_request(port, "POST", "/tokenize", {
            "prompt": " zebra", "add_special_tokens": False})[2])["tokens"][0]
        want = json.loads(http_request(port, "POST", "/detokenize",
                                       {"tokens": [forced, forced]})[2])["prompt"]
        out = text(max_tokens=2, logit_bias={str(forced): 100})
        check(out == want, f"+100 on token {forced}: {out!r}, wanted {want!r}")

    def max_tokens():
        r = call(max_tokens=3, extra_body={"ignore_eos": True})
        check(r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length",
              f"max_tokens=3: {r.usage}")

    def n():
        r = call(n=3, temperature=1.0, seed=5)
        check(sorted(c.index for c in r.choices) == [0, 1, 2], f"n=3: {r.choices}")
        finished = {c.index: c.finish_reason for chunk in call(n=2, stream=True)
                    for c in chunk.choices if c.finish_reason}
        check(set(finished) == {0, 1}, f"streamed n=2 finished {finished}")

    def seed():
        a = text(temperature=1.0, seed=42, max_tokens=12)
        check(a == text(temperature=1.0, seed=42, max_tokens=12), "seed does not repeat")
        others = {text(temperature=1.0, seed=s, max_tokens=12) for s in (1, 2)}
        check(len(others | {a}) > 1, "three seeds, one text: the seed is ignored")

    def stop():
        full = long_greedy
        cut = full[len(full) // 2:len(full) // 2 + 2]
        check(len(cut) == 2, f"too short: {full!r}")
        r = call(max_tokens=16, stop=cut)
        got = r.choices[0].message.content if endpoint == "chat" else r.choices[0].text
        check(got == full[:full.find(cut)] and r.choices[0].finish_reason == "stop",
              f"stop {cut!r}: {got!r}")

    def stream():
        pieces = []
        for chunk in call(stream=True):
            for c in chunk.choices:
                pieces.append((c.delta.content if endpoint == "chat" else c.text) or "")
        check("".join(pieces) == greedy, f"streamed {''.join(pieces)!r} != {greedy!r}")

    def stream_options():
        usage = [c.usage for c in call(stream=True, stream_options={"include_usage": True})
                 if c.usage]
        check(len(usage) == 1 and usage[0].completion_tokens > 0, f"usage chunks {usage}")

    def temperature():
        check(text() == greedy, "temperature 0 is not deterministic")
        hot = {text(temperature=2.0, seed=s) for s in range(2)}
        check(len(hot) > 1, "temperature 2 sampled one text from two seeds")

    def top_p():
        # The nucleus of a tiny top_p is the top token alone: sampling becomes greedy.
        outs = {text(temperature=1.0, top_p=1e-6, seed=s) for s in range(2)}
        check(outs == {greedy}, f"top_p=1e-6 sampled {outs} (greedy {greedy!r})")

    def user():
        # A tenant of the FairShare queue order: no effect a lone request can show, so the
        # check is that it is accepted and leaves the answer alone.
        check(text(user="tenant-a") == greedy, "user changed a greedy answer")

    def model():
        import openai
        try:
            call(model="no-such-model")
            check(False, "an unknown model was served")
        except openai.NotFoundError:
            pass

    return {"frequency_penalty": penalty("frequency_penalty"),
            "presence_penalty": penalty("presence_penalty"), "logit_bias": logit_bias,
            "max_tokens": max_tokens, "n": n, "seed": seed, "stop": stop, "stream": stream,
            "stream_options": stream_options, "temperature": temperature, "top_p": top_p,
            "user": user, "model": model}


def chat_checks(calls):
    c = calls.chat
    checks = shared_checks(calls, c, calls.chat_text, "chat")

    def logprobs():
        r = c(logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        check(len(content) == r.usage.completion_tokens and
              all(len(t.top_logprobs) == 2 for t in content), f"logprobs {content[:2]}")
        check(c().choices[0].logprobs is None, "logprobs without asking")

    def max_completion_tokens():
        r = c(max_completion_tokens=2, extra_body={"ignore_eos": True})
        check(r.usage.completion_tokens == 2, f"max_completion_tokens=2: {r.usage}")

    def response_format():
        check(c(response_format={"type": "text"}).choices[0].message.content == calls.chat_text(),
              "response_format text changed the answer")
        structured_output_checks(calls)

    def store():
        check(c(store=False).choices, "store=False refused")
        refused(c, "store", store=True)

    def tool_choice():
        check(c(tool_choice="none").choices, "tool_choice none refused")
        refused(c, "tool_choice", tool_choice="auto")

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    refusals = {
        "tools": [tool], "functions": [{"name": "f", "parameters": {"type": "object"}}],
        "function_call": "auto", "parallel_tool_calls": False,
        "audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text"],
        "metadata": {"k": "v"}, "moderation": {"enabled": True},
        "prediction": {"type": "content", "content": "x"}, "prompt_cache_key": "k",
        "prompt_cache_options": {"mode": "auto"}, "prompt_cache_retention": "24h",
        "reasoning_effort": "low", "safety_identifier": "u1", "service_tier": "auto",
        "verbosity": "low", "web_search_options": {}}
    checks.update({"messages": lambda: check(calls.chat_text() != "", "empty answer"),
                   "logprobs": logprobs, "top_logprobs": logprobs,
                   "max_completion_tokens": max_completion_tokens,
                   "response_format": response_format, "store": store,
                   "tool_choice": tool_choice})
    for name, value in refusals.items():
        checks[name] = (lambda name=name, value=value: refused(c, name, **{name: value}))
    return checks


def validates(text, schema):
    """The text is JSON valid against `schema` (jsonschema's Draft 2020-12 validator)."""
    import jsonschema
    try:
        value = json.loads(text)
    except ValueError as e:
        raise AssertionError(f"not JSON: {text!r}: {e}") from e
    jsonschema.validate(value, schema)
    return value


def structured_output_checks(calls):
    """response_format and "grammar": outputs parse and validate; refusals name the field."""
    import openai
    compilations = "tinfer:structured_output_compilations_total"
    before = metrics(calls.server.port).get(compilations, 0)
    person = {"type": "json_schema",
              "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}}
    stopped = truncated = 0
    for seed in (1, 2):
        r = calls.chat(messages=JSON_MESSAGES, response_format=person, n=3, temperature=1.0,
                       seed=seed, max_tokens=128)
        for choice in r.choices:
            if choice.finish_reason == "length":
                truncated += 1
                continue
            check(choice.finish_reason == "stop", f"finish {choice.finish_reason}")
            validates(choice.message.content, PERSON_SCHEMA)
            stopped += 1
    check(stopped >= 5, f"only {stopped} of 6 schema answers stopped within 128 tokens")
    # Six answers, two requests, one schema: compiled once (another test may have compiled it
    # already: at most one more).
    after = metrics(calls.server.port).get(compilations, 0)
    check(after - before <= 1, f"one schema compiled {after - before:.0f} times")
    # Any JSON object: only the stopped answers can be checked whole. At temperature 1 this
    # small model writes strings that never end; greedy and 0.5 close the object.
    objects = 0
    for temperature, seed in ((0, 0), (0.5, 3), (0.5, 4)):
        choice = calls.chat(messages=JSON_MESSAGES, response_format={"type": "json_object"},
                            temperature=temperature, seed=seed, max_tokens=160).choices[0]
        check(choice.finish_reason == "stop" or temperature > 0, f"greedy json_object: {choice}")
        if choice.finish_reason == "stop":
            check(isinstance(validates(choice.message.content, {"type": "object"}), dict),
                  "json_object gave a non-object")
            objects += 1
    # Completions take response_format outside the client's signature, and "grammar".
    r = calls.comp(prompt="A person as JSON:", temperature=1.0, seed=5, max_tokens=128,
                   extra_body={"response_format": person})
    check(r.choices[0].finish_reason == "stop", f"completions: {r.choices[0]}")
    validates(r.choices[0].text, PERSON_SCHEMA)
    yes_no = {calls.comp_text(prompt="Is the sky blue? Answer:", temperature=1.0, seed=s,
                              extra_body={"grammar": 'root ::= "yes" | "no"'}) for s in range(3)}
    check(yes_no <= {"yes", "no"} and yes_no, f"grammar yes|no gave {yes_no}")
    # Refusals: a keyword outside the subset (named), an unknown type, a grammar that does not
    # parse, and a grammar beside a JSON format.
    try:
        calls.chat(response_format={"type": "json_schema", "json_schema": {
            "name": "p", "schema": {"type": "string", "format": "email"}}})
        check(False, "an unsupported schema keyword was accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "response_format" and "format" in e.body.get("message"),
              f"unsupported keyword: {e.body}")
    refused(calls.chat, "response_format", response_format={"type": "xml"})
    refused(calls.comp, "grammar", extra_body={"grammar": "root ::= ("})
    refused(calls.chat, "grammar", response_format={"type": "json_object"},
            extra_body={"grammar": 'root ::= "x"'})
    print(f"  structured output: {stopped} schema answers valid, {truncated} truncated; "
          f"{objects} of 3 json_object answers stopped and parse; grammar gave {sorted(yes_no)}")


def completion_checks(calls):
    c = calls.comp
    checks = shared_checks(calls, c, calls.comp_text, "completions")

    def logprobs():
        lp = c(logprobs=3).choices[0].logprobs
        check(len(lp.tokens) == len(lp.token_logprobs) > 0 and
              all(len(t) == 3 for t in lp.top_logprobs), f"logprobs {lp}")

    def best_of():
        check(len(c(best_of=2, n=2, temperature=1.0).choices) == 2, "best_of = n refused")
        refused(c, "best_of", best_of=3, n=1)

    def echo():
        check(c(echo=False).choices[0].text == calls.comp_text(), "echo=False changed the text")
        refused(c, "echo", echo=True)

    checks.update({"prompt": lambda: check(calls.comp_text() != "", "empty text"),
                   "logprobs": logprobs, "best_of": best_of, "echo": echo,
                   "suffix": lambda: refused(c, "suffix", suffix=" The end.")})
    return checks


def test_every_parameter(server, client):
    import openai
    calls = Calls(server, client)
    chat_names, completion_names = create_parameters()
    print(f"  openai {openai.__version__}: chat.completions.create takes {len(chat_names)} "
          f"parameters, completions.create {len(completion_names)}")
    for endpoint, names, checks in (("chat", chat_names, chat_checks(calls)),
                                    ("completions", completion_names, completion_checks(calls))):
        unclassified = [n for n in names if n not in checks]
        check(not unclassified, f"{endpoint}: parameters nobody classified: {unclassified}")
        honoured, refusals = [], []
        for name in names:
            before, started = len(failures), time.time()
            try:
                checks[name]()
            except Exception as e:  # noqa: BLE001 -- report every parameter
                failures.append(f"{endpoint}.{name}")
                print(f"  FAIL {endpoint}.{name}: {e!r}")
            if time.time() - started > 2:
                print(f"  {endpoint}.{name} took {time.time() - started:.1f} s")
            if len(failures) == before:
                is_refusal = getattr(checks[name], "__name__", "") == "<lambda>" and \
                    name not in ("messages", "prompt")
                (refusals if is_refusal else honoured).append(name)
        print(f"  {endpoint}: honoured {honoured}; refused by name {refusals}")
    # Fields outside the API, and vLLM's extensions that are honoured.
    refused(calls.chat, "max_token", extra_body={"max_token": 5})
    refused(calls.comp, "frobnicate", extra_body={"frobnicate": True})
    refused(calls.chat, "priority", extra_body={"priority": 3})
    check(calls.chat_text(extra_body={"priority": 0}) == calls.chat_text(), "priority 0")
    outs = {calls.comp_text(temperature=1.0, seed=s, extra_body={"top_k": 1}) for s in range(3)}
    check(outs == {calls.comp_text()}, f"top_k=1 is not greedy: {outs}")
    refused(calls.chat, "messages",
            messages=[{"role": "user", "content": "hi", "name": "alice"}])
    refused(calls.chat, "stream_options", stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True})
    refused(calls.comp, "logit_bias", logit_bias={str(10 ** 8): 1})
    refused(calls.chat, "max_tokens", max_tokens=3, max_completion_tokens=4)
    if failures:
        raise AssertionError(f"{len(failures)} parameters failed: {failures}")


def test_tokenize(server, client):
    calls = Calls(server, client)
    port = server.port
    status, _, body = http_request(port, "POST", "/tokenize", {"prompt": PROMPT})
    t = json.loads(body)
    _, _, models = http_request(port, "GET", "/v1/models")
    max_len = json.loads(models)["data"][0]["max_model_len"]
    check(status == 200 and t["count"] == len(t["tokens"]) > 0 and t["max_model_len"] == max_len,
          f"/tokenize: {status} {t}")
    usage = calls.comp(max_tokens=1).usage
    check(usage.prompt_tokens == t["count"], f"usage {usage.prompt_tokens} vs {t['count']}")
    status, _, body = http_request(port, "POST", "/detokenize", {"tokens": t["tokens"]})
    check(status == 200 and json.loads(body)["prompt"].endswith(PROMPT), f"/detokenize {body}")
    status, _, body = http_request(port, "POST", "/tokenize", {"messages": MESSAGES})
    chat_usage = calls.chat(max_tokens=1).usage
    check(status == 200 and json.loads(body)["count"] == chat_usage.prompt_tokens,
          f"chat /tokenize {body[:200]} vs usage {chat_usage.prompt_tokens}")
    for path, bad, param in (("/tokenize", {}, "prompt"), ("/tokenize", {"prompt": 5}, "prompt"),
                             ("/tokenize", {"prompt": "x", "messages": MESSAGES}, "prompt"),
                             ("/tokenize", {"prompt": "x", "foo": 1}, "foo"),
                             ("/detokenize", {"tokens": "x"}, "tokens"),
                             ("/detokenize", {"tokens": [-1]}, "tokens"),
                             ("/detokenize", {"tokens": [10 ** 9]}, "tokens"),
                             ("/detokenize", {"tokens": [1.5]}, "tokens")):
        expect_error(server, path, bad, 400, param=param)
    expect_error(server, "/tokenize", {"prompt": "x", "model": "nope"}, 404, param="model")
    status, _, _ = http_request(port, "GET", "/tokenize")
    check(status == 405, f"GET /tokenize: {status}")


def test_disconnect_frees_kv(server, client):
    """The official client's stream closed mid-way: the sequence is aborted and its KV blocks
    return to the pool."""
    aborted = 'tinfer:request_success_total{finished_reason="abort"}'
    before = metrics(server.port)
    stream = client.completions.create(model=server.model_name, prompt="Tell a long story.",
                                       max_tokens=400, stream=True,
                                       extra_body={"ignore_eos": True})
    chunks = 0
    for _ in stream:
        chunks += 1
        if chunks == 2:
            break
    held = metrics(server.port)["tinfer:kv_cache_sequence_blocks"]
    check(held > 0, f"a streaming sequence holds {held} KV blocks")
    stream.close()
    started = time.time()
    after = wait_for_metrics(
        server.port, lambda v: v.get(aborted, 0) > before.get(aborted, 0) and
        v["tinfer:kv_cache_sequence_blocks"] == 0 and v["tinfer:num_requests_live"] == 0, 15)
    check(after.get(aborted, 0) == before.get(aborted, 0) + 1, "the hang-up was not aborted")
    check(after["tinfer:kv_cache_sequence_blocks"] == 0,
          f"{after['tinfer:kv_cache_sequence_blocks']} KV blocks still held after the hang-up")
    print(f"  {held:.0f} KV blocks held mid-stream, back to 0 {time.time() - started:.2f} s "
          "after the client closed its stream")


def test_operator_flags(args, greedy_text, fp32_blocks):
    import openai
    key = "s3cret-key"
    with Server(args.server, args.model, "--threads", args.threads, "--api-key", key,
                "--speculative-tokens", "4", "--no-enable-prefix-caching",
                "--max-model-len", "256") as server:
        port = server.port
        check(http_request(port, "GET", "/health")[0] == 200, "/health needs no key")
        check(http_request(port, "GET", "/metrics")[0] == 200, "/metrics needs no key")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key},
                        {"Authorization": "Bearer " + key + "x"}):
            for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"),
                                 ("POST", "/tokenize")):
                status, h, body = http_request(port, method, path, {"prompt": "x"}, headers)
                check(status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
                      and h.get("WWW-Authenticate") == "Bearer", f"{path} {headers}: {status}")
        try:
            openai.OpenAI(base_url=server.url(), api_key="wrong", max_retries=0).models.list()
            check(False, "a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        client = openai.OpenAI(base_url=server.url(), api_key=key, max_retries=0, timeout=120)
        models = client.models.list().data
        check(len(models) == 1 and models[0].model_extra.get("max_model_len") == 256,
              f"models {models}")
        name = models[0].id
        before = metrics(port)
        text = client.completions.create(model=name, prompt=PROMPT, max_tokens=24,
                                         temperature=0).choices[0].text
        again = client.completions.create(model=name, prompt=PROMPT, max_tokens=24,
                                          temperature=0).choices[0].text
        after = metrics(port)
        drafted = after["tinfer:spec_decode_num_draft_tokens_total"]
        accepted = after["tinfer:spec_decode_num_accepted_tokens_total"]
        check(drafted > 0 and accepted > 0, f"no speculation: {drafted} drafted, {accepted} kept")
        check(text == again == greedy_text, f"speculation changed greedy output: {text!r} vs "
              f"{greedy_text!r}")
        check(after["tinfer:prefix_cache_hits_total"] == before["tinfer:prefix_cache_hits_total"],
              "prefix-cache hits with --no-enable-prefix-caching")
        lp = client.completions.create(model=name, prompt=PROMPT, max_tokens=4, temperature=0,
                                       logprobs=1).choices[0].logprobs
        check(len(lp.tokens) == 4, "logprobs under speculation")
        try:
            client.completions.create(model=name, prompt=PROMPT, max_tokens=250)
            check(False, "a request past --max-model-len was served")
        except openai.BadRequestError as e:
            check("256" in str(e), f"the limit is not named: {e}")
        # Drafts under a grammar: checked against it, so the answers still validate.
        person = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON_SCHEMA}}
        for seed in (0, 1):
            r = client.chat.completions.create(model=name, messages=JSON_MESSAGES, seed=seed,
                                               temperature=1.0 if seed else 0, max_tokens=128,
                                               response_format=person)
            check(r.choices[0].finish_reason == "stop", f"schema with drafts: {r.choices[0]}")
            validates(r.choices[0].message.content, PERSON_SCHEMA)
        print(f"  speculation: {accepted:.0f} of {drafted:.0f} drafts kept; greedy unchanged; "
              "schema answers with drafts validate")
    # Each compiled --kv-cache-dtype pair serves, and one budget holds as many more blocks as
    # its codecs are smaller than fp32 (lower bounds a little under the byte ratios).
    for dtype, ratio in (("bf16", 1.9), ("fp8_e4m3", 3.5), ("fp8_e5m2", 3.5), ("int8", 3.5),
                         ("int4", 5.0), ("int8,int4", 4.2)):
        with Server(args.server, args.model, "--threads", args.threads, "--kv-cache-dtype",
                    dtype) as server:
            client = openai.OpenAI(base_url=server.url(), api_key="none", max_retries=0,
                                   timeout=120)
            r = client.completions.create(model=client.models.list().data[0].id, prompt=PROMPT,
                                          max_tokens=6, temperature=0)
            check(r.usage.completion_tokens > 0 and r.choices[0].text, f"{dtype} KV: {r}")
            blocks = metrics(server.port)["tinfer:kv_cache_total_blocks"]
            check(fp32_blocks > 0 and blocks > ratio * fp32_blocks,
                  f"{dtype} KV: {blocks} blocks vs {fp32_blocks} at fp32")
            print(f"  --kv-cache-dtype {dtype}: {blocks:.0f} blocks where fp32 has "
                  f"{fp32_blocks:.0f}; greedy {r.choices[0].text!r}")
    # A separate draft model: the served file drafting for itself, so under greedy decoding
    # (batch-invariant forward passes) nearly every draft is kept, and the answer is unchanged.
    with Server(args.server, args.model, "--threads", args.threads, "--draft-model", args.model,
                "--speculative-tokens", "4") as server:
        client = openai.OpenAI(base_url=server.url(), api_key="none", max_retries=0, timeout=120)
        name = client.models.list().data[0].id
        text = client.completions.create(model=name, prompt=PROMPT, max_tokens=24,
                                         temperature=0).choices[0].text
        after = metrics(server.port)
        drafted = after["tinfer:spec_decode_num_draft_tokens_total"]
        accepted = after["tinfer:spec_decode_num_accepted_tokens_total"]
        check(drafted > 0 and accepted >= 0.9 * drafted,
              f"--draft-model: {accepted} of {drafted} drafts kept")
        check(text == greedy_text, f"--draft-model changed greedy output: {text!r} vs "
              f"{greedy_text!r}")
        print(f"  --draft-model (itself): {accepted:.0f} of {drafted:.0f} drafts kept; greedy "
              "unchanged")
    refusals = [(["--speculative-tokens", "100000"], "--speculative-tokens"),
                (["--kv-cache-dtype", "int3"], "--kv-cache-dtype"),
                (["--draft-model", args.model], "--draft-model"),
                (["--draft-model", args.model, "--speculative-tokens", "4", "--kv-cache-dtype",
                  "int8"], "--draft-model")]
    if args.other_model:
        refusals.append((["--draft-model", args.other_model, "--speculative-tokens", "4"],
                         "--draft-model"))
    for flags, named in refusals:
        bad = subprocess.run([args.server, "--model", args.model, *flags],
                             capture_output=True, text=True, timeout=60)
        check(bad.returncode != 0 and named in bad.stdout + bad.stderr,
              f"{flags}: {bad.returncode} {bad.stderr[-200:]}")
        print(f"  refused {' '.join(flags)}: {(bad.stdout + bad.stderr).strip()[-160:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="")
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--other-model", default="",
                        help="a GGUF of another shape, refused as --model's --draft-model")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    try:
        import openai
    except ImportError:
        return missing("the openai package is not installed (scripts/python_deps.sh)")
    try:
        import jsonschema  # noqa: F401 -- structured output is validated with it
    except ImportError:
        return missing("the jsonschema package is not installed (scripts/python_deps.sh)")
    code = missing_server_or_model(args)
    if code is not None:
        return code
    began = time.time()
    failed = []

    def run(name, body):
        if args.only and args.only not in name:
            return
        started = time.time()
        try:
            body()
            print(f"PASS {name} ({time.time() - started:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001
            failed.append(name)
            print(f"FAIL {name}: {e!r}", flush=True)

    greedy = {}
    with Server(args.server, args.model, "--threads", args.threads) as server:
        client = openai.OpenAI(base_url=server.url(), api_key="none", max_retries=0, timeout=120)
        server.model_name = client.models.list().data[0].id
        greedy["text"] = client.completions.create(model=server.model_name, prompt=PROMPT,
                                                   max_tokens=24, temperature=0).choices[0].text
        greedy["blocks"] = metrics(server.port)["tinfer:kv_cache_total_blocks"]
        run("test_every_parameter", lambda: test_every_parameter(server, client))
        run("test_tokenize", lambda: test_tokenize(server, client))
        run("test_disconnect_frees_kv", lambda: test_disconnect_frees_kv(server, client))
    run("test_operator_flags", lambda: test_operator_flags(args, greedy["text"],
                                                            greedy["blocks"]))
    print(f"{'FAILED: ' + ', '.join(failed) if failed else 'all passed'} "
          f"in {time.time() - began:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
