#pragma once
// What libllama's vocabulary loader asserts on instead of refusing, checked
// first so that such a file is refused with the key and the value named
// rather than taking the process down.

namespace llama_tp {

class GgufFile;

// Throws llama_tp::Error naming the file, the key and the entry: two tokens
// of the same text (libllama keys its lookup by text; an empty text counts as
// "[EMPTY_<id>]", as libllama renames it), or a byte token in a WordPiece
// ("bert") vocabulary, which has no byte tokens to decode.
void check_vocabulary(const GgufFile & file);

}  // namespace llama_tp
