#pragma once
// Text <-> tokens through libllama loaded with vocab_only: the vocabulary and
// its special tokens come from the same GGUF file the weights do. The
// vocabulary is immutable after loading, so the const methods may be called
// from several threads at once (request threads tokenize while the engine
// thread detokenizes).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct llama_model;
struct llama_vocab;
struct llama_model_kv_override;

namespace llama_tp {

struct MetadataOverride;

// Overrides in libllama's form (llama_model_params::kv_overrides), ended by an empty key.
std::vector<llama_model_kv_override> to_llama_overrides(const std::vector<MetadataOverride> & overrides);
// And back (libcommon's --override-kv parse): up to an empty key, if any.
std::vector<MetadataOverride> from_llama_overrides(const std::vector<llama_model_kv_override> & kv);

class Tokenizer {
  public:
    // Throws llama_tp::Error when the file has no usable vocabulary.
    // overrides: metadata read in place of the file's (tokenizer.* keys).
    explicit Tokenizer(const std::string & gguf_path, const std::vector<MetadataOverride> & overrides = {});
    ~Tokenizer();
    Tokenizer(const Tokenizer &) = delete;
    Tokenizer & operator=(const Tokenizer &) = delete;

    std::vector<int32_t> tokenize(const std::string & text, bool add_special, bool parse_special) const;
    std::string piece(int32_t token, bool special = false) const;
    std::string detokenize(const std::vector<int32_t> & tokens, bool special = false) const;

    int32_t n_vocab() const;
    int32_t bos() const;
    int32_t eos() const;
    bool add_bos() const;
    bool is_eog(int32_t token) const;

    // Fill-in-the-middle tokens (-1 where the vocabulary has none).
    struct FimTokens {
        int32_t prefix = -1, suffix = -1, middle = -1, repo = -1, separator = -1;
    };
    FimTokens fim() const;

    // The GGUF's chat template, or one of its named ones
    // (tokenizer.chat_template.NAME: "rerank"); "" when it has none.
    std::string chat_template(const char * name = nullptr) const;
    // Whether the vocabulary's own rules end a text with EOS / a separator.
    bool add_eos() const;
    bool add_sep() const;
    int32_t sep() const;  // -1 where the vocabulary has none

    // For libcommon (chat templates) and libllama samplers (grammar).
    const llama_model * model() const { return model_; }
    const llama_vocab * vocab() const { return vocab_; }

  private:
    llama_model * model_ = nullptr;
    const llama_vocab * vocab_ = nullptr;
};

}  // namespace llama_tp
