"""What the simulated model says: a short worked answer ending in \\boxed{},
right with probability success_rate, otherwise plausibly wrong."""

import random
import re
from typing import Dict, Optional

from ..grading.answers import answers_equivalent, numeric_value
from ..questions.cases import Case, choice_letter
from ..questions.prompts import normalise_text, parse_options

CHARS_PER_TOKEN = 4  # rough English/LaTeX average, good enough for usage numbers

OPENINGS = (
    "Let me work through this step by step.",
    "We need to read the problem carefully first.",
    "Let's set up what we know and solve it.",
    "I'll break the problem into smaller parts.",
)
CLOSINGS = (
    "Therefore, the final answer is $\\boxed{{{answer}}}$.",
    "So the answer is $\\boxed{{{answer}}}$.",
    "Putting it all together, we get $\\boxed{{{answer}}}$.",
)
CHOICE_CLOSINGS = (
    "Comparing the options, the best match is option {answer}.\n\n\\boxed{{{answer}}}",
    "The correct option is therefore $\\boxed{{{answer}}}$.",
)


def estimate_tokens(text: str) -> int:
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _shifted_integer(value: int, rng: random.Random) -> str:
    spread = max(3, abs(value) // 10)
    delta = rng.randint(1, spread) * rng.choice((-1, 1))
    if value >= 0 and value + delta < 0:
        delta = -delta  # keep a non-negative answer non-negative, as a model would
    return str(value + delta)


def _mutated_digit(reference: str, rng: random.Random) -> Optional[str]:
    digits = [m.start() for m in re.finditer(r"\d", reference)]
    if not digits:
        return None
    pos = rng.choice(digits)
    new_digit = str((int(reference[pos]) + rng.randint(1, 9)) % 10)
    return reference[:pos] + new_digit + reference[pos + 1:]


def wrong_answer(case: Case, rng: random.Random) -> str:
    """A math answer the regex grader judges wrong, in the style of the reference."""
    value = numeric_value(case.reference)
    candidates = []
    if value is not None and value.denominator == 1:
        candidates.append(_shifted_integer(int(value), rng))
    candidates += [_mutated_digit(case.reference, rng), f"{case.reference} + 1", "\\text{no solution}"]
    for candidate in candidates:
        if candidate is not None and not answers_equivalent(candidate, case.reference):
            return candidate
    return "\\text{no solution}"


def shown_letter(case: Case, user_text: str) -> str:
    """The letter under which the prompt shows the correct option (prompts may
    order options differently from the dataset file)."""
    correct_text = normalise_text(case.choices[ord(case.reference) - ord("A")])
    for letter, text in parse_options(user_text).items():
        if text == correct_text:
            return letter
    return case.reference


def response_text(case: Case, answer: str, rng: random.Random) -> str:
    words = case.question.split()
    restated = " ".join(words[:12]) + (" ..." if len(words) > 12 else "")
    closing = rng.choice(CHOICE_CLOSINGS if case.is_multiple_choice else CLOSINGS)
    return (f"{rng.choice(OPENINGS)}\n\nThe problem says: \"{restated}\"\n\n"
            f"Working through the details and checking each step carefully.\n\n"
            + closing.format(answer=answer))


def decide(case: Case, user_text: str, success_rate: float, rng: random.Random) -> Dict:
    correct = rng.random() < success_rate
    if case.is_multiple_choice:
        right = shown_letter(case, user_text)
        answer = right if correct else rng.choice([choice_letter(i) for i in range(len(case.choices))
                                                    if choice_letter(i) != right])
    else:
        answer = case.reference if correct else wrong_answer(case, rng)
    return {"correct": correct, "answer": answer, "text": response_text(case, answer, rng)}


def truncate_to_tokens(text: str, max_tokens: Optional[int]):
    """(text, finish_reason) after applying a max_tokens limit."""
    if max_tokens is None or estimate_tokens(text) <= max_tokens:
        return text, "stop"
    return text[:max_tokens * CHARS_PER_TOKEN], "length"
