"""Pulling a final answer out of model text and deciding whether two answers
are the same: numbers compare as numbers, LaTeX compares after normalising
away presentation (\\text, $, \\left, degrees, thousands separators ...)."""

import re
from fractions import Fraction
from typing import List, Optional

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+"
_SIGNED_NUMBER = re.compile(rf"^[-+]?(?:{_NUMBER})$")
_NUMBER_IN_TEXT = re.compile(rf"(?:(?<![\w.)])-)?(?:{_NUMBER})(?:/\d+(?!\.\d))?")
_PLAIN_FRACTION = re.compile(r"^([-+]?\d+)/(\d+)$")
_LATEX_FRACTION = re.compile(r"^([-+]?)\\frac\{([-+]?[\d.]+)\}\{([-+]?[\d.]+)\}$")
_MIXED_NUMBER = re.compile(r"^(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_NUMBER_WITH_UNIT = re.compile(rf"^([-+]?(?:{_NUMBER}))\s+[a-zA-Z]{{2,}}(?:[\s.]+[a-zA-Z]+)*(?:\^\{{?\d\}}?)?\.?$")
_TEXT_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_ASSIGNMENT = re.compile(r"^[a-zA-Z]\s*=\s*(?=\S)")
_ANSWER_PHRASE = re.compile(r"(?i:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*")
_CHOICE_PHRASE = re.compile(r"(?i:answer|option|choice)\s*(?:is|:)?\s*(?i:option|choice)?\s*"
                            r"[\(\*\[]*\s*([A-Z])\b(?![a-z'])")
_PAREN_LETTER = re.compile(r"\(([A-Z])\)")
_BARE_LETTER_LINE = re.compile(r"^\W*([A-Z])\W*$")
_REMOVED_TOKENS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "{,}")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
_RELATIVE_TOLERANCE = Fraction(1, 10 ** 9)


def _braced_group(text: str, start: int) -> Optional[str]:
    """Content of the {...} group opening at text[start], nested braces included."""
    depth = 0
    for pos in range(start, len(text)):
        if text[pos] == "{" and (pos == 0 or text[pos - 1] != "\\"):
            depth += 1
        elif text[pos] == "}" and text[pos - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[start + 1:pos]
    return None  # unbalanced: the answer was cut off


def boxed_contents(text: str) -> List[str]:
    """Every \\boxed{...} (or \\fbox) content, in order."""
    found = []
    for match in re.finditer(r"\\(?:boxed|fbox)(?![a-zA-Z])", text):
        pos = match.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] == "{":
            content = _braced_group(text, pos)
            if content is not None:
                found.append(content)
        else:  # "\boxed 5" form: the next token
            token = re.match(r"[^\s$]+", text[pos:])
            if token:
                found.append(token.group(0))
    return found


def last_boxed(text: str) -> Optional[str]:
    found = boxed_contents(text)
    return found[-1] if found else None


def _phrase_answer(text: str) -> Optional[str]:
    matches = list(_ANSWER_PHRASE.finditer(text))
    if not matches:
        return None
    tail = text[matches[-1].end():].split("\n", 1)[0].strip().strip("*").strip()
    tail = re.split(r"(?<=[^\d\s])\.(?:\s|$)", tail, 1)[0].strip()  # first sentence; keeps "3.5"
    if not tail:
        return None
    if numeric_value(tail) is not None or len(tail) <= 40:
        return tail
    numbers = _NUMBER_IN_TEXT.findall(tail)
    return numbers[-1] if numbers else None


def extract_answer(text: str) -> Optional[str]:
    """Final answer of a math response: last \\boxed{}, else "#### x", else
    "the answer is x", else the last number in the text."""
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        marked = text.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()
        if marked:
            return marked
    phrase = _phrase_answer(text)
    if phrase is not None:
        return phrase
    numbers = _NUMBER_IN_TEXT.findall(text)
    return numbers[-1] if numbers else None


def _unwrap_text_commands(text: str) -> str:
    previous = None
    while previous != text:
        previous, text = text, _TEXT_WRAPPERS.sub(r"\1", text)
    return text


def clean_latex(answer: str) -> str:
    """Removes presentation that does not change the value."""
    text = answer.strip()
    for opening, closing in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        while len(text) >= len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            text = text[len(opening):len(text) - len(closing)].strip()
    text = _unwrap_text_commands(text)
    for token in _REMOVED_TOKENS:
        text = text.replace(token, "")
    text = text.replace("\\ ", " ").replace("~", " ")
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
    text = _DEGREES.sub("", text)
    text = text.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    text = _ASSIGNMENT.sub("", text.strip())
    return text.strip().rstrip(".").strip()


def _fraction(text: str) -> Optional[Fraction]:
    if _SIGNED_NUMBER.match(text):
        return Fraction(text.replace(",", ""))
    match = _PLAIN_FRACTION.match(text) or _LATEX_FRACTION.match(text) or _MIXED_NUMBER.match(text)
    if not match:
        return None
    if match.re is _PLAIN_FRACTION:
        numerator, denominator = Fraction(match.group(1)), Fraction(match.group(2))
        sign = 1
    elif match.re is _LATEX_FRACTION:
        sign = -1 if match.group(1) == "-" else 1
        numerator, denominator = Fraction(match.group(2)), Fraction(match.group(3))
    else:
        whole, numerator, denominator = (Fraction(g) for g in match.groups())
        return None if denominator == 0 else whole + numerator / denominator
    return None if denominator == 0 else sign * numerator / denominator


def numeric_value(answer: str) -> Optional[Fraction]:
    """The exact value of a number-like answer ("025", "2,125", "-3.50", "\\frac{3}{4}",
    "18 dollars", "$5", "30\\%"), or None."""
    text = clean_latex(answer).replace(" ", "") if answer else ""
    value = _fraction(text)
    if value is None and answer:
        with_unit = _NUMBER_WITH_UNIT.match(clean_latex(answer))
        value = _fraction(with_unit.group(1)) if with_unit else None
    return value


def canonical_text(answer: str) -> str:
    text = clean_latex(answer)
    text = re.sub(r"\^\{(\w)\}", r"^\1", text)
    text = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", text)
    text = re.sub(r"\s+", "", text).casefold()
    while text.startswith("{") and text.endswith("}") and _braced_group(text, 0) == text[1:-1]:
        text = text[1:-1]
    return text


def _split_top_level(text: str) -> List[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _as_sequence(text: str):
    """(brackets, items) for "(a, b)" / "[a,b]" / "a, b"; None for a single item."""
    brackets = ""
    if len(text) >= 2 and text[0] in "([{" and text[-1] in ")]}":
        inner = text[1:-1]
        if _split_top_level(inner) != [inner] or text[0] != "{":
            brackets, text = text[0] + text[-1], inner
    items = _split_top_level(text)
    return (brackets, items) if len(items) > 1 else None


def _numbers_equal(a: Fraction, b: Fraction) -> bool:
    return a == b or abs(a - b) <= _RELATIVE_TOLERANCE * max(abs(a), abs(b))


def answers_equivalent(predicted: Optional[str], reference: str) -> bool:
    if predicted is None or not predicted.strip():
        return False
    if canonical_text(predicted) == canonical_text(reference):
        return True
    ref_value, pred_value = numeric_value(reference), numeric_value(predicted)
    if ref_value is not None and pred_value is not None:
        return _numbers_equal(ref_value, pred_value)
    ref_seq = _as_sequence(clean_latex(reference))
    pred_seq = _as_sequence(clean_latex(predicted))
    if ref_seq and pred_seq and ref_seq[0] == pred_seq[0] and len(ref_seq[1]) == len(pred_seq[1]):
        return all(answers_equivalent(p, r) for p, r in zip(pred_seq[1], ref_seq[1]))
    return False


def extract_choice(text: str, n_choices: int = 4) -> Optional[str]:
    """The chosen option letter: \\boxed{C}, "the answer is (C)", "(C)", or a lone letter line."""
    if not text:
        return None
    letters = {chr(ord("A") + i) for i in range(max(1, min(n_choices, 26)))}
    boxed = last_boxed(text)
    if boxed is not None:
        inner = clean_latex(boxed).strip().strip("()[]{}*").strip()
        if inner[:1].upper() in letters and (len(inner) == 1 or inner[1] in ").:] "):
            return inner[0].upper()
    for pattern in (_CHOICE_PHRASE, _PAREN_LETTER):
        hits = [m.group(1) for m in pattern.finditer(text) if m.group(1) in letters]
        if hits:
            return hits[-1]
    for line in reversed(text.strip().splitlines()):
        match = _BARE_LETTER_LINE.match(line.strip())
        if match and match.group(1) in letters:
            return match.group(1)
        if line.strip():
            break
    return None
