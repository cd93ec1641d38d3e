#pragma once
// Fixed English prompts the measuring tools feed to models (any vocabulary
// tokenizes them).

#include <string>
#include <vector>

namespace llama_tp {

inline const std::vector<std::string> & builtin_prompts() {
    static const std::vector<std::string> prompts = {
        "Once upon a time, there was a little girl named Lily. She loved to play",
        "The quick brown fox jumps over the lazy dog because",
        "In the middle of the forest stood an old oak tree. Every morning the birds",
        "Tom and his friend went to the park. They saw a big red ball and",
        "The capital of France is Paris. The capital of Germany is",
        "One day, a small cat found a shiny key under the bed. It",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
        "Water boils at one hundred degrees. When it is cold, water turns into",
        "The sun was shining and the sky was blue. Sam wanted to",
        "Mom said: \"Please clean your room before dinner.\" Ben said:",
        "Once there was a big dog who liked to run fast. He ran to the",
        "1, 2, 3, 4, 5, 6, 7,",
    };
    return prompts;
}

}  // namespace llama_tp
