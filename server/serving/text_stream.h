#pragma once
// Turns generated token pieces into text that is safe to send: a stop string
// ends the text (and is not sent), a tail that could still become a stop
// string or that ends inside a UTF-8 character is held back until the next
// piece decides it.

#include <string>
#include <vector>

namespace llama_tp::server {

class TextStream {
  public:
    explicit TextStream(std::vector<std::string> stops = {});

    // Appends a piece; returns the newly releasable text. After a stop string
    // matched, stopped() is true and the text ends right before it.
    std::string push(const std::string & piece);

    // At the end of generation: releases whatever is still held back.
    std::string flush();

    bool stopped() const { return stopped_; }
    const std::string & stop_word() const { return stop_word_; }
    const std::string & text() const { return text_; }  // everything released so far

  private:
    std::vector<std::string> stops_;
    std::string buf_;      // all text (released + held)
    size_t released_ = 0;  // buf_[0, released_) has been returned
    std::string text_;
    bool stopped_ = false;
    std::string stop_word_;
};

// Bytes at the end of `s` that begin a UTF-8 sequence not yet complete.
size_t incomplete_utf8_tail(const std::string & s);

}  // namespace llama_tp::server
