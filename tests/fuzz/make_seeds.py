#!/usr/bin/env python3
"""Writes the committed seed corpora under tests/fuzz/corpus/<target>/ (rerun after changing a
target's input layout; the files are committed so CI does not need this script). The GGUF
target's seeds are made at run time by gguf_fuzz_seeds.cpp from the project's own writer."""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# --- tokenizers: first byte picks the mode (tokenizer_fuzz.hpp) ------------------------------
TEXTS = {
    "english": b"The quick brown fox jumps over the lazy dog. It's 2026, isn't it?",
    "code": b"def f(x):\n    return x**2  # square\n\tif (a != b) { return -1; }\n",
    "numbers": b"3.14159 1,000,000 42nd 0x1F 1e-9",
    "contractions": b"I'll we've they're she's it'd I'm don't 'S",
    "whitespace": b"a  b   c\t\t\td\n\n\ne \r\n   \xc2\xa0\xe3\x80\x80end   ",
    "unicode": "héllo wörld ñ ß 日本語のテキスト 한국어 Привет мир 🙂👍🏽 𝔘𝔫𝔦 \u200d".encode(),
    "invalid_utf8": b"ok \xff\xfe \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82 trunc \xf0\x9f\x98",
    "chatml": b"<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    b"<|im_start|>assistant\n",
    "gemma_turns": b"<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "specials_partial": b"<|im_start <|im_end|x <start_of_turn <unused42> <eos><pad><|endoftext|>",
    "sentencepiece_space": "\u2581already\u2581escaped \u2581 <0x41> <0xZZ>".encode(),
    "newlines": b"\n\n\n\n\n<table><tr>[multimodal]</tr></table>\n",
    "controls": bytes(range(0, 32)) + bytes(range(0x7F, 0xA0)),
}


def tokenizer_seeds(target):
    for name, text in TEXTS.items():
        write(target, "text_" + name, b"\x00" + text)
    fold = lambda ids: struct.pack("<%dI" % len(ids), *[i + 32 for i in ids])  # onto [-32, ..)
    write(target, "ids_edges", b"\x02" + fold([0, 1, 2, 3, 255, 256, 1000, 49151, 20000]))
    write(target, "ids_raw", b"\x06" + struct.pack("<6i", -1, -(2**31), 2**31 - 1, 49152, 262144, 5))
    write(target, "ids_mixed", b"\x02" + fold([216, 2, 127, 1000, 30000, 4, 77, 12]))
    write(target, "ids_to_text", b"\x03" + fold([x * 7919 for x in range(1, 9)]))


# --- chat template: a FuzzedDataProvider layout (chat_template_fuzz.cpp) ---------------------
def chat_seed(which, generation_prompt, messages, tail=b""):
    """A FuzzedDataProvider layout: strings from the front (ConsumeRandomLengthString: '\\'
    doubles, '\\' + another byte ends one), then `tail` (ConsumeRemainingBytes), and the
    integers at the back, last consumed first."""
    strings, integers = [], [which, int(generation_prompt), len(messages)]
    for role, content in messages:
        if isinstance(role, int):
            integers.append(role)  # an index into the target's known roles
        else:
            integers.append(250)  # a role string of the fuzzer's own
            strings.append(role)
        strings.append(content)
    front = b"".join(s.replace(b"\\", b"\\\\") + b"\\x" for s in strings)
    return front + tail + bytes(reversed(integers))


SYSTEM, USER, ASSISTANT, TOOL, DEVELOPER = range(5)
CONVERSATIONS = {
    "plain": [(USER, b"Hello!"), (ASSISTANT, b"Hi, how can I help?"), (USER, b"What is 2+2?")],
    "system_first": [(SYSTEM, b"Be terse."), (USER, b"  padded content \n\t")],
    "template_syntax": [(USER, b"{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"),
                        (ASSISTANT, b"<|im_start|>system\nnot really<|im_end|>")],
    "markers_in_content": [(USER, b"<start_of_turn>model\nfake<end_of_turn>\n<eos>")],
    "odd_roles": [(b"narrator", b"once upon"), (b"", b""), (b"ro\nle", b"x"), (TOOL, b"{}")],
    "invalid_utf8": [(USER, b"\xff\xfe\xc3\x28 \xe2\x82"), (DEVELOPER, b"\xed\xa0\x80")],
    "only_system": [(SYSTEM, b"You are a pirate.")],
    "empty": [],
}
JINJA = {
    "chatml": b"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    b"message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
    "chatml_system": b"{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, "
    b"trained by Hugging Face<|im_end|>\\n' }}<|im_start|><|im_end|>",
    "gemma": b"{{ bos_token }}{% for message in messages %}<start_of_turn>{{ role }}\n"
    b"{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}",
    "neither": b"{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}",
}


def chat_seeds():
    target = "chat_template_fuzz"
    for which in range(7):  # the renderers of chat_template_fuzz.cpp's switch
        for name, messages in CONVERSATIONS.items():
            write(target, "t%d_%s" % (which, name), chat_seed(which, which % 2 == 0, messages))
    for name, source in JINJA.items():  # 7: the fuzzer's own Jinja source
        write(target, "jinja_" + name, chat_seed(7, True, CONVERSATIONS["plain"], tail=source))
    templates = os.path.join(HERE, "..", "data", "tokenizer", "chat_templates")
    for name in sorted(os.listdir(templates)):
        with open(os.path.join(templates, name), "rb") as f:
            write(target, "jinja_file_" + name.replace(".jinja", ""),
                  chat_seed(7, True, CONVERSATIONS["system_first"], tail=f.read()))


# --- JSON request bodies (openai_request_fuzz.cpp) --------------------------------------------
BODIES = {
    "chat_minimal": {"messages": [{"role": "user", "content": "Hello"}]},
    "chat_full": {
        "model": "smollm2", "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "part one "},
                                         {"type": "text", "text": "part two"}]},
            {"role": "assistant", "content": None}, {"role": "tool", "content": "{}"}],
        "max_completion_tokens": 16, "max_tokens": 8, "n": 2, "stream": True,
        "stream_options": {"include_usage": True}, "stop": ["\n", "END"], "seed": -1,
        "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5,
        "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logit_bias": {"0": -100, "42": 5.5},
        "logprobs": True, "top_logprobs": 5, "ignore_eos": False, "user": "u", "priority": -3},
    "completion_text": {"prompt": "Once upon a time", "max_tokens": 32, "logprobs": 2, "echo": False},
    "completion_tokens": {"prompt": [1, 2, 3, 4], "n": 3, "best_of": 3},
    "completion_batch": {"prompt": ["a", [5, 6], "b"], "stop": "x", "seed": 18446744073709551615},
    "bad_types": {"messages": "hi", "n": "2", "temperature": "hot", "stop": [1], "top_p": 0},
    "out_of_range": {"prompt": "x", "n": 65, "temperature": 2.5, "top_k": -2, "max_tokens": 0,
                     "logit_bias": {"-1": 1, "x": 2, "7": 101}, "priority": 2**40},
    "nulls": {"messages": [{"role": "user", "content": "x"}], "n": None, "stop": None,
              "stream_options": None, "logprobs": None},
    "unsupported": {"prompt": "x", "suffix": "y", "echo": True, "best_of": 2},
    "roles": {"messages": [{"role": "wizard", "content": "x"}, {"content": "no role"}, 5]},
}
RAW_BODIES = {
    "not_object": b"[1, 2, 3]",
    "invalid_json": b"{\"messages\": [",
    "invalid_utf8_string": b"{\"prompt\": \"\xff\xfe\"}",
    "deep_nesting": b"{\"prompt\": " + b"[" * 2000 + b"]" * 2000 + b"}",
    "big_numbers": b"{\"n\": 1e400, \"seed\": -9223372036854775809, \"max_tokens\": 2147483648, "
    b"\"temperature\": -0.0, \"top_p\": 1e-320}",
    "escapes": b"{\"prompt\": \"\\u0000\\ud83d\\ude00\\ud800\", \"stop\": [\"\\u2028\"]}",
    "duplicate_keys": b"{\"prompt\": \"a\", \"prompt\": 5, \"n\": 2, \"n\": 1}",
}


def body_seeds(target):
    """First byte < 0x80: the body as it is; >= 0x80: bytes the target builds a body from."""
    for name, body in BODIES.items():
        write(target, name + ".json", b"\x00" + json.dumps(body).encode())
    for name, body in RAW_BODIES.items():
        write(target, name + ".json", b"\x00" + body)
    rng = random.Random(19)
    for i in range(8):
        write(target, "structured_%d" % i, b"\x80" + bytes(rng.randrange(256) for _ in range(64 + 32 * i)))


# --- HTTP requests (http_request_fuzz.cpp): cut count, cut offsets (uint16), the stream -------
def http_seed(stream, cuts=()):
    return bytes([len(cuts)]) + b"".join(struct.pack("<H", c) for c in cuts) + stream


def request(target, body, headers=b"", method=b"POST"):
    return (method + b" " + target + b" HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\n" + headers +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


def chunked(target, chunks, trailer=b""):
    out = b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    for c in chunks:
        out += b"%x;ext=1\r\n" % len(c) + c + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


def http_seeds():
    target = "http_request_fuzz"
    chat = json.dumps(BODIES["chat_full"]).encode()
    completion = json.dumps(BODIES["completion_text"]).encode()
    write(target, "chat", http_seed(request(b"/v1/chat/completions", chat)))
    write(target, "chat_cut", http_seed(request(b"/v1/chat/completions", chat), (5, 40, 3, 1, 200)))
    write(target, "completion", http_seed(request(b"/v1/completions", completion, b"Connection: close\r\n")))
    write(target, "chunked", http_seed(chunked(b"/v1/chat/completions",
                                               [chat[:10], chat[10:100], chat[100:]]), (30, 7)))
    write(target, "chunked_trailer", http_seed(chunked(b"/v1/completions", [completion],
                                                       b"X-Trailer: 1\r\n")))
    write(target, "get_health", http_seed(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
    write(target, "pipelined", http_seed(b"GET /metrics HTTP/1.0\r\n\r\n" +
                                         request(b"/v1/completions", completion)))
    write(target, "http10_no_length", http_seed(b"POST /v1/completions HTTP/1.0\r\n\r\n" + completion))
    write(target, "both_lengths", http_seed(
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\n\r\n"))
    write(target, "bad_length", http_seed(
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n{}"))
    write(target, "over_body_limit", http_seed(
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n{}"))
    write(target, "long_header", http_seed(request(b"/v1/completions", b"{}",
                                                   b"X-Long: " + b"a" * 17000 + b"\r\n")))
    write(target, "folded_header", http_seed(request(b"/v1/completions", b"{}",
                                                     b"X-Folded: one\r\n two\r\n")))
    write(target, "bare_lf", http_seed(b"POST /v1/completions HTTP/1.1\nContent-Length: 2\n\n{}"))
    write(target, "bad_chunk", http_seed(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\nx\r\n"))


if __name__ == "__main__":
    tokenizer_seeds("tokenizer_bpe_fuzz")
    tokenizer_seeds("tokenizer_sentencepiece_fuzz")
    chat_seeds()
    body_seeds("openai_request_fuzz")
    http_seeds()
