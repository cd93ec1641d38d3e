"""Where each tensor's data lies in a GGUF file, for tests that change a
weight in place (the header is read, nothing else)."""

import struct
from pathlib import Path

# Scalar metadata types: struct format by GGUF type id.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def get(self, fmt):
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += struct.calcsize("<" + fmt)
        return value

    def string(self):
        n = self.get("Q")
        self.at += n
        return self.data[self.at - n:self.at].decode(errors="replace")  # vocabularies hold byte pieces

    def value(self, kind):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, n = self.get("I"), self.get("Q")
            return [self.value(item) for _ in range(n)]
        return self.get(SCALARS[kind])


def tensor_offsets(path):
    """{name: (ggml type id, absolute byte offset of its data)}."""
    data = Path(path).read_bytes()
    r = Reader(data)
    assert data[:4] == b"GGUF", path
    r.at = 4
    version, n_tensors, n_kv = r.get("I"), r.get("Q"), r.get("Q")
    assert version >= 2, version
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        value = r.value(r.get("I"))
        if key == "general.alignment":
            alignment = value
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.get("I")
        r.at += 8 * n_dims
        infos.append((name, r.get("I"), r.get("Q")))
    start = (r.at + alignment - 1) // alignment * alignment
    return {name: (kind, start + offset) for name, kind, offset in infos}
