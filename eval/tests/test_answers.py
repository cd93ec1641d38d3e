"""Answer extraction and the regex / multiple-choice graders on tricky answers."""

import pytest

from llama_eval.grading.answers import answers_equivalent, boxed_contents, extract_answer, extract_choice, numeric_value
from llama_eval.grading.graders import ChoiceGrader, RegexGrader

# (model response, reference, expected verdict)
REGEX_CASES = [
    ("The answer is \\boxed{25}.", "025", True),                       # AIME zero padding
    ("\\boxed{025}", "25", True),
    ("So she has \\boxed{2,125} apples.", "2125", True),                 # thousands separator
    ("\\boxed{2125}", "2,125", True),
    ("The total is \\boxed{1,450,000}", "1450000", True),
    ("We get \\boxed{-10}.", "-10", True),                               # negative
    ("We get \\boxed{10}.", "-10", False),
    ("\\boxed{3.50}", "3.5", True),                                      # trailing zero decimal
    ("\\boxed{\\frac{3}{4}}", "0.75", True),                             # fraction vs decimal
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", True),
    ("\\boxed{3/4}", "\\frac{3}{4}", True),
    ("\\boxed{-\\frac{24}{25}}", "-\\frac{24}{25}", True),
    ("\\boxed{\\frac{24}{25}}", "-\\frac{24}{25}", False),
    ("\\boxed{\\text{18 dollars}}", "18", True),                         # units inside \\text
    ("\\boxed{18 \\text{ dollars}}", "18", True),
    ("\\boxed{\\$36}", "\\$36", True),                                   # currency
    ("\\boxed{36}", "\\$36", True),
    ("\\boxed{30^\\circ}", "30", True),                                  # degrees
    ("\\boxed{30^{\\circ}}", "30^\\circ", True),
    ("\\boxed{45\\%}", "45", True),                                      # percent
    ("$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$", "\\left( 3, \\frac{\\pi}{2} \\right)", True),  # nested braces
    ("\\boxed{(3,\\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("\\boxed{(3,\\frac{\\pi}{3})}", "\\left( 3, \\frac{\\pi}{2} \\right)", False),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", True),        # nested braces, \\sqrt3 form
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", True),
    ("\\boxed{evelyn}", "\\text{Evelyn}", True),
    ("\\boxed{x = 5}", "5", True),                                       # assignment
    ("\\boxed{y = -2x}", "y = -2x", True),
    ("\\boxed{3, 5, 7}", "3, 5, 7", True),
    ("\\boxed{3, 5, 8}", "3, 5, 7", False),
    ("\\boxed{(0.5, 2)}", "(\\frac{1}{2}, 2)", True),                    # tuple, element-wise numbers
    ("\\boxed{1\\frac{4}{5}}", "\\frac{9}{5}", True),                    # mixed number
    ("\\boxed{5}.", "5.", True),                                         # trailing period
    ("First \\boxed{3}, but on reflection \\boxed{4}", "4", True),       # the last box counts
    ("First \\boxed{3}, but on reflection \\boxed{4}", "3", False),
    ("She pays 2 + 3 = 5 dollars, so 7 in total.", "7", True),           # last number, no box
    ("She needs 1,200 bricks.", "1200", True),
    ("The temperature drops to -4 degrees.", "-4", True),
    ("The ages are 3-4 years.", "-4", False),                            # a hyphen is not a sign
    ("She earns $18.00 per day.", "18", True),
    ("Reasoning...\n#### 72", "72", True),                               # GSM8K marker
    ("The answer is 42.", "42", True),
    ("The final answer is: 3.5", "3.50", True),
    ("\\boxed{12", "12", True),                                           # unterminated box: last number
    ("No numbers at all.", "5", False),
    ("", "5", False),
    ("\\boxed{10^{10}}", "10^{10}", True),
    ("\\boxed{10^{11}}", "10^{10}", False),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
]


@pytest.mark.parametrize("response,reference,expected", REGEX_CASES)
def test_regex_grader(response, reference, expected):
    verdict = RegexGrader().grade({"reference": reference}, response)
    assert verdict.correct is expected, (response, reference, verdict.extracted)


def test_table_is_big_enough():
    assert len(REGEX_CASES) >= 25


# (response, reference letter, expected verdict)
CHOICE_CASES = [
    ("The answer is (C).", "C", True),
    ("The answer is (C).", "B", False),
    ("Thinking...\n\\boxed{C}", "C", True),
    ("\\boxed{\\text{(B)}}", "B", True),
    ("$\\boxed{D) 42}$", "D", True),
    ("Answer: A", "A", True),
    ("**Answer:** B", "B", True),
    ("I pick option D.", "D", True),
    ("Between (A) and (B), (B) fits better.", "B", True),
    ("Let me think.\nC", "C", True),
    ("A quick look shows the answer is B", "B", True),   # the article "A" is not a choice
    ("The answer is E.", "E", False),                    # not among four options
    ("I cannot decide.", "A", False),
]


@pytest.mark.parametrize("response,reference,expected", CHOICE_CASES)
def test_choice_grader(response, reference, expected):
    task = {"reference": reference, "choices": ["w", "x", "y", "z"]}
    verdict = ChoiceGrader().grade(task, response)
    assert verdict.correct is expected, (response, verdict.extracted)


def test_boxed_contents_handles_nesting_and_escaped_braces():
    text = "a \\boxed{\\frac{1}{\\sqrt{2}}} b \\boxed{\\{1,2\\}} c \\fbox{7}"
    assert boxed_contents(text) == ["\\frac{1}{\\sqrt{2}}", "\\{1,2\\}", "7"]


def test_numeric_value_parses_number_forms():
    assert numeric_value("025") == 25
    assert numeric_value("-2,125") == -2125
    assert numeric_value("\\frac{1}{3}") * 3 == 1
    assert numeric_value(".5") * 2 == 1
    assert numeric_value("1,2") is None      # a pair, not a number
    assert numeric_value("2x") is None       # an expression, not a number with a unit
    assert numeric_value("\\frac{1}{0}") is None


def test_extract_answer_prefers_box_over_last_number():
    assert extract_answer("Compute 3 + 4 = 7, hence \\boxed{7} and not 9") == "7"


def test_extract_choice_respects_number_of_options():
    assert extract_choice("The answer is (E)", n_choices=5) == "E"
    assert extract_choice("The answer is (E)", n_choices=4) is None


def test_equivalence_is_not_fooled_by_prefix_numbers():
    assert not answers_equivalent("12", "123")
    assert not answers_equivalent("1.2", "12")
