#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/): small valid
inputs each target starts mutating from. Run it again when a format changes."""

import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

# GGUF value types
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
F32_TENSOR = 0


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, value):
    if kind == STRING:
        return gguf_string(value)
    if kind == ARRAY:
        item, values = value
        return struct.pack("<IQ", item, len(values)) + b"".join(gguf_value(item, v) for v in values)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}[kind], value)


def gguf(metadata, tensors, alignment=32):
    """metadata: [(key, type, value)]; tensors: [(name, shape)] of F32 zeros."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        out += gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, value)
    offset = 0
    datas = []
    for name, shape in tensors:
        out += gguf_string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", F32_TENSOR, offset)
        n = 4
        for d in shape:
            n *= d
        datas.append(bytes(n))
        offset += (n + alignment - 1) // alignment * alignment
    out += bytes((-len(out)) % alignment)
    for d in datas:
        out += d + bytes((-len(d)) % alignment)
    return out


def model(arch, extra=()):
    a = arch
    meta = [("general.architecture", STRING, arch), (f"{a}.context_length", U32, 256),
            (f"{a}.embedding_length", U32, 8), (f"{a}.block_count", U32, 2),
            (f"{a}.feed_forward_length", U32, 16), (f"{a}.attention.head_count", U32, 2),
            (f"{a}.attention.head_count_kv", U32, 1), (f"{a}.attention.layer_norm_rms_epsilon", F32, 1e-5),
            (f"{a}.rope.freq_base", F32, 10000.0), *extra]
    return gguf(meta, [("token_embd.weight", (8, 16)), ("output_norm.weight", (8,))])


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def step(kind, tokens=(), edits=(), kv=b"", read_seq=-1, read_n=0, embd=()):
    def array(fmt, values):
        return struct.pack("<I", len(values)) + b"".join(struct.pack("<" + fmt, *v) if isinstance(v, tuple)
                                                          else struct.pack("<" + fmt, v) for v in values)
    n = len(tokens)
    return (struct.pack("<Ii", 0x53505454, kind) + array("iiiiii", list(edits)) + array("i", list(tokens))
            + array("i", list(range(n))) + array("i", [0] * n) + array("B", [1] * n) + array("f", [])
            + array("f", list(embd)) + struct.pack("<Q", 0x1234) + array("B", list(kv)) + struct.pack("<ii", read_seq, read_n))


def main():
    write("gguf", "llama.gguf", model("llama"))
    write("gguf", "qwen3moe.gguf", model("qwen3moe", [("qwen3moe.expert_count", U32, 4),
                                                      ("qwen3moe.expert_used_count", U32, 2),
                                                      ("qwen3moe.expert_feed_forward_length", U32, 8)]))
    write("gguf", "gemma3.gguf", model("gemma3", [("gemma3.attention.sliding_window", U32, 64),
                                                  ("gemma3.attention.key_length", U32, 4)]))
    write("gguf", "gpt-oss.gguf", model("gpt-oss", [("gpt-oss.expert_count", U32, 4),
                                                    ("gpt-oss.expert_used_count", U32, 2),
                                                    ("gpt-oss.attention.sliding_window", U32, 16)]))
    write("gguf", "arrays.gguf", model("qwen2", [("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "b", "<s>"])),
                                                 ("qwen2.attention.head_count_kv", ARRAY, (I32, [1, 2]))]))

    write("step", "decode", step(1, tokens=[1, 2, 3], edits=[(0, 2, -1, 0, -1, 0)]))
    write("step", "decode-mtp-head", step(1, tokens=[4, 5], embd=[0.5, -1.0, 0.25, 2.0]))
    write("step", "shutdown", step(2))
    write("step", "load", step(3, tokens=[5], kv=b"\x01\x02\x03\x04"))
    write("step", "read", step(4, read_seq=1, read_n=7))
    write("step", "heartbeat", step(5))

    requests = {
        "chat": {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                 "max_tokens": 8, "temperature": 0.5, "stop": ["\n"], "logit_bias": {"15": -1},
                 "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
        "tools": {"messages": [{"role": "user", "content": "Weather?"},
                               {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                                     "function": {"name": "w", "arguments": "{}"}}]},
                               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
                  "tools": [{"type": "function", "function": {"name": "w", "parameters": {
                      "type": "object", "properties": {"city": {"type": "string"}}}}}],
                  "tool_choice": "auto"},
        "completion": {"prompt": "Once upon a time", "n_predict": 16, "samplers": ["top_k", "temperature"],
                       "grammar": "root ::= \"a\" | \"b\"", "n_probs": 2, "stream": True},
        "completion-object": {"prompt": [{"prompt_string": "Once", "multimodal_data": []}], "n_predict": 4},
        "infill": {"input_prefix": "def f(", "input_suffix": "):", "input_extra": [{"filename": "a.py", "text": "x"}]},
        "responses": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
                      "instructions": "Be brief.", "max_output_tokens": 8},
        "messages": {"system": "Be brief.", "max_tokens": 8,
                     "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
    }
    for name, body in requests.items():
        write("request", name + ".json", json.dumps(body).encode())


if __name__ == "__main__":
    main()
