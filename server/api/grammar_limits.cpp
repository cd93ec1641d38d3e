#include "server/api/grammar_limits.h"

#include "server/http/api_error.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <vector>

namespace llama_tp::server {

namespace {

constexpr int64_t kSaturated = int64_t(1) << 40;

// An element of a sequence: a terminal (literal, class, any character,
// token), a rule by name, or a group (an unnamed rule).
struct Element {
    enum class Kind { Terminal, Rule, Group } kind = Kind::Terminal;
    std::string name;       // Rule
    int group = -1;         // Group: its index in Grammar::bodies
    bool optional = false;  // ?, * or {0,...}: the element may be skipped
};
using Sequence = std::vector<Element>;
using Alternatives = std::vector<Sequence>;

// The rules and groups of a GBNF text, as libllama's parser reads them: a
// rule ends at the end of its line unless a group is open.
struct Grammar {
    std::vector<Alternatives> bodies;  // named rules and groups alike
    std::map<std::string, int> rules;  // name -> body
    int depth = 0;
};

bool name_char(char c) {
    return std::isalnum((unsigned char) c) || c == '-' || c == '_';
}

class GbnfReader {
  public:
    explicit GbnfReader(const std::string & s) : s_(s) {}

    Grammar read() {
        try {
            for (space(true); at_ < s_.size(); space(true)) {
                const std::string name = word();
                space(false);
                if (name.empty() || s_.compare(at_, 3, "::=") != 0) break;
                at_ += 3;
                const int body = (int) g_.bodies.size();
                g_.bodies.emplace_back();
                g_.rules[name] = body;
                Alternatives alts = alternatives(0);
                g_.bodies[body] = std::move(alts);
            }
        } catch (const TooDeep &) {
        }
        return std::move(g_);
    }

  private:
    struct TooDeep {};

    // Spaces and comments; newlines too where newlines do not end a rule.
    void space(bool newlines) {
        while (at_ < s_.size()) {
            const char c = s_[at_];
            if (c == '#') {
                while (at_ < s_.size() && s_[at_] != '\n') ++at_;
            } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++at_;
            } else {
                return;
            }
        }
    }

    std::string word() {
        const size_t from = at_;
        while (at_ < s_.size() && name_char(s_[at_])) ++at_;
        return s_.substr(from, at_ - from);
    }

    // Past a literal, class or token reference that ends with `close`.
    void skip_to(char close) {
        for (++at_; at_ < s_.size() && s_[at_] != close; ++at_) {
            if (s_[at_] == '\\') ++at_;
        }
        ++at_;
    }

    Alternatives alternatives(int depth) {
        Alternatives alts;
        alts.push_back(sequence(depth));
        while (at_ < s_.size() && s_[at_] == '|') {
            ++at_;
            space(true);
            alts.push_back(sequence(depth));
        }
        return alts;
    }

    Sequence sequence(int depth) {
        Sequence seq;
        const bool nested = depth > 0;
        for (space(nested); at_ < s_.size(); space(nested)) {
            const char c = s_[at_];
            Element e;
            if (c == '"' || c == '[') {
                skip_to(c == '"' ? '"' : ']');
            } else if (c == '<' || c == '!') {
                if (c == '!') ++at_;
                skip_to('>');
            } else if (c == '.') {
                ++at_;
            } else if (name_char(c)) {
                e.kind = Element::Kind::Rule;
                e.name = word();
            } else if (c == '(') {
                if (depth + 1 > kMaxGrammarDepth) {
                    g_.depth = depth + 1;
                    throw TooDeep{};
                }
                g_.depth = std::max(g_.depth, depth + 1);
                ++at_;
                space(true);
                e.kind = Element::Kind::Group;
                e.group = (int) g_.bodies.size();
                g_.bodies.emplace_back();
                Alternatives alts = alternatives(depth + 1);
                g_.bodies[e.group] = std::move(alts);
                if (at_ < s_.size() && s_[at_] == ')') ++at_;
            } else if ((c == '*' || c == '+' || c == '?' || c == '{') && !seq.empty()) {
                repeat(seq.back());
                continue;
            } else {
                break;  // '|', ')', a newline ending the rule, or text the parser refuses
            }
            seq.push_back(std::move(e));
        }
        return seq;
    }

    // A repetition of the last element: may it be skipped?
    void repeat(Element & e) {
        const char c = s_[at_++];
        if (c == '*' || c == '?') {
            e.optional = true;
        } else if (c == '{') {
            space(true);
            e.optional |= at_ < s_.size() && s_[at_] == '0' &&
                          (at_ + 1 >= s_.size() || !std::isdigit((unsigned char) s_[at_ + 1]));
            while (at_ < s_.size() && s_[at_] != '}') ++at_;
            ++at_;
        }
    }

    const std::string & s_;
    size_t at_ = 0;
    Grammar g_;
};

// How many places a grammar can stand at once: at a position of a
// sequence, the element there (each alternative of a rule or group it
// names, in turn) and, where it may be skipped, whatever follows.
class FanOut {
  public:
    explicit FanOut(const Grammar & g)
        : g_(g), body_(g.bodies.size(), -1), nullable_(g.bodies.size(), -1), busy_(g.bodies.size(), false) {}

    int64_t most() {
        int64_t m = 1;
        for (const Alternatives & alts : g_.bodies) {
            for (const Sequence & seq : alts) m = std::max(m, most_in(seq));
        }
        for (size_t b = 0; b < g_.bodies.size(); ++b) m = std::max(m, body((int) b));
        return m;
    }

  private:
    // The most places of any position of a sequence, from its end back, so
    // that a long run of skippable elements is walked once, not once per
    // position.
    int64_t most_in(const Sequence & seq) {
        int64_t after = 1, m = 1;  // past the end: where the sequence was called from
        for (size_t i = seq.size(); i-- > 0;) {
            const int64_t here = element(seq[i]);
            after = std::min(kSaturated, skippable(seq[i]) ? here + after : here);
            m = std::max(m, after);
        }
        return m;
    }

    // The places at a sequence's position i.
    int64_t at(const Sequence & seq, size_t i) {
        int64_t n = 0;
        for (; i < seq.size(); ++i) {
            n = std::min(kSaturated, n + element(seq[i]));
            if (!skippable(seq[i])) return n;
        }
        return std::min(kSaturated, n + 1);  // past the end: where the sequence was called from
    }

    int64_t element(const Element & e) {
        const int b = target(e);
        return b < 0 ? 1 : body(b);
    }

    int target(const Element & e) const {
        if (e.kind == Element::Kind::Group) return e.group;
        if (e.kind == Element::Kind::Rule) {
            const auto it = g_.rules.find(e.name);
            return it == g_.rules.end() ? -1 : it->second;
        }
        return -1;
    }

    int64_t body(int b) {
        if (body_[b] >= 0) return body_[b];
        if (busy_[b]) return 1;  // a rule reached from itself
        busy_[b] = true;
        int64_t n = 0;
        for (const Sequence & seq : g_.bodies[b]) n = std::min(kSaturated, n + at(seq, 0));
        busy_[b] = false;
        return body_[b] = std::max<int64_t>(n, 1);
    }

    bool skippable(const Element & e) {
        if (e.optional) return true;
        const int b = target(e);
        return b >= 0 && nullable(b);
    }

    bool nullable(int b) {
        if (nullable_[b] >= 0) return nullable_[b] != 0;
        if (busy_[b]) return false;
        busy_[b] = true;
        bool any = false;
        for (const Sequence & seq : g_.bodies[b]) {
            bool all = true;
            for (const Element & e : seq) all = all && skippable(e);
            any = any || all;
        }
        busy_[b] = false;
        nullable_[b] = any ? 1 : 0;
        return any;
    }

    const Grammar & g_;
    std::vector<int64_t> body_;
    std::vector<int> nullable_;
    std::vector<bool> busy_;
};

}  // namespace

GrammarShape grammar_shape(const std::string & gbnf) {
    const Grammar g = GbnfReader(gbnf).read();
    GrammarShape shape;
    shape.depth = g.depth;
    shape.fan_out = FanOut(g).most();
    return shape;
}

void check_grammar(const std::string & gbnf, const std::string & field) {
    const GrammarShape shape = grammar_shape(gbnf);
    const std::string what = field == "grammar" ? "'grammar'" : "the grammar of '" + field + "'";
    if (shape.depth > kMaxGrammarDepth) {
        throw bad_request(what + " nests groups deeper than " + std::to_string(kMaxGrammarDepth) + " levels", field,
                          "invalid_value");
    }
    if (shape.fan_out > kMaxGrammarFanOut) {
        throw bad_request(what + " can stand at " + std::to_string(shape.fan_out) + " places at once (more than " +
                              std::to_string(kMaxGrammarFanOut) +
                              "; e.g. a rule or enum of that many alternatives), which every token would compare "
                              "pairwise",
                          field, "invalid_value");
    }
}

}  // namespace llama_tp::server
