// What the request grammar bounds read of GBNF: the deepest group and the
// most places a grammar can stand at once (server/api/grammar_limits.h).
#include "server/api/grammar_limits.h"
#include "server/http/api_error.h"

#include <string>

#include <gtest/gtest.h>

namespace llama_tp::server {
namespace {

std::string alternatives(const std::string & name, int n) {
    std::string s = name + " ::= (";
    for (int i = 0; i < n; ++i) s += (i ? " | \"w" : "\"w") + std::to_string(i) + "\"";
    return s + ")\n";
}

TEST(GrammarLimits, AJsonGrammarStandsAtFewPlaces) {
    const std::string json = R"(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws   # a comment | with | bars
string ::= "\"" ( [^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= ([ \t\n] ws)?
)";
    const GrammarShape s = grammar_shape(json);
    EXPECT_EQ(s.depth, 2);
    EXPECT_GT(s.fan_out, 1);
    EXPECT_LT(s.fan_out, 32);
    EXPECT_NO_THROW(check_grammar(json, "grammar"));
}

TEST(GrammarLimits, AlternativesOfRulesAddUp) {
    EXPECT_EQ(grammar_shape(alternatives("root", 1025)).fan_out, 1025);
    const std::string nested = "root ::= \"x\" (a | b)+\n" + alternatives("a", 600) + alternatives("b", 600);
    EXPECT_EQ(grammar_shape(nested).fan_out, 1200);
    // What may be skipped adds what follows it.
    EXPECT_EQ(grammar_shape("root ::= \"a\"? \"b\"* [c-d]{0,2} \"e\" \"f\"\n").fan_out, 4);
    EXPECT_EQ(grammar_shape("root ::= \"a\"+ \"b\"{1,3}\n").fan_out, 1);
    // A long run of skippable elements is read once (a request may bring
    // megabytes of them), not once per position.
    std::string run = "root ::=";
    for (int i = 0; i < 200000; ++i) run += " \"a\"?";
    EXPECT_EQ(grammar_shape(run + " \"b\"\n").fan_out, 200001);
    // A rule that reaches itself is counted once.
    EXPECT_EQ(grammar_shape("root ::= \"a\" root | \"b\" | root2\nroot2 ::= root \"c\"\n").fan_out, 3);
    EXPECT_THROW(check_grammar(alternatives("root", 1025), "grammar"), ApiError);
    EXPECT_NO_THROW(check_grammar(alternatives("root", 1024), "grammar"));
}

TEST(GrammarLimits, DepthStopsReadingPastTheLimit) {
    std::string deep = "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')') + "\n";
    EXPECT_EQ(grammar_shape(deep).depth, kMaxGrammarDepth + 1);
    try {
        check_grammar(deep, "response_format");
        FAIL() << "a grammar 300 groups deep was taken";
    } catch (const ApiError & e) {
        EXPECT_NE(std::string(e.what()).find("the grammar of 'response_format' nests groups deeper than 256"),
                  std::string::npos)
            << e.what();
    }
    std::string brackets = "root ::= \"((((\" [(((] " + std::string(3, '(') + "\"a\"" + std::string(3, ')') + "\n";
    EXPECT_EQ(grammar_shape(brackets).depth, 3);
}

}  // namespace
}  // namespace llama_tp::server
