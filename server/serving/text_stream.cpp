#include "server/serving/text_stream.h"

#include <algorithm>

namespace llama_tp::server {

size_t incomplete_utf8_tail(const std::string & s) {
    // Look back over at most 3 bytes for the lead byte of the last sequence.
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = (unsigned char) s[n - back];
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte
        }
        size_t need = 1;
        if ((c & 0xE0) == 0xC0) {
            need = 2;
        } else if ((c & 0xF0) == 0xE0) {
            need = 3;
        } else if ((c & 0xF8) == 0xF0) {
            need = 4;
        }
        return need > back ? back : 0;
    }
    return 0;
}

TextStream::TextStream(std::vector<std::string> stops) {
    for (auto & s : stops) {
        if (!s.empty()) {
            stops_.push_back(std::move(s));
        }
    }
}

std::string TextStream::push(const std::string & piece) {
    if (stopped_) {
        return "";
    }
    buf_ += piece;

    // A full stop string can only start in the unreleased part: any earlier
    // start would have been a partial match, and partial matches are held.
    size_t best = std::string::npos;
    for (const auto & s : stops_) {
        const size_t p = buf_.find(s, released_);
        if (p != std::string::npos && (best == std::string::npos || p < best)) {
            best = p;
            stop_word_ = s;
        }
    }
    if (best != std::string::npos) {
        stopped_ = true;
        std::string out = buf_.substr(released_, best - released_);
        buf_.resize(best);
        released_ = best;
        text_ += out;
        return out;
    }

    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t hold = 0;
    const size_t pending = buf_.size() - released_;
    for (const auto & s : stops_) {
        const size_t max_k = std::min(pending, s.size() - 1);
        for (size_t k = max_k; k > hold; k--) {
            if (buf_.compare(buf_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    hold = std::max(hold, incomplete_utf8_tail(buf_));
    hold = std::min(hold, pending);

    std::string out = buf_.substr(released_, pending - hold);
    released_ += out.size();
    text_ += out;
    return out;
}

std::string TextStream::flush() {
    if (stopped_) {
        return "";
    }
    std::string out = buf_.substr(released_);
    released_ = buf_.size();
    text_ += out;
    return out;
}

}  // namespace llama_tp::server
