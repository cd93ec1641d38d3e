"""How a case becomes a chat request, and how a server-side reader finds the
question again inside such a request.

The question always forms whole paragraphs of the last user message: the
instructions and the options are separated from it by blank lines. A reader
(the simulator) can therefore recover it by trying spans of paragraphs as
exact keys, without knowing the template and without fuzzy matching.
"""

import re
from typing import Dict, Iterator, List, Optional

from .cases import Case, choice_letter

MATH_INSTRUCTION = "Solve the problem step by step, then write the final answer inside \\boxed{}."
CHOICE_INSTRUCTION = ("Answer the following multiple-choice question. Think step by step, then write "
                      "only the letter of the correct option inside \\boxed{} (for example \\boxed{A}).")

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[\)\.:]\s+(.+?)\s*$")
MAX_PARAGRAPHS = 64  # bounds the span search; real prompts have a handful


def normalise_text(text: str) -> str:
    """Whitespace- and case-insensitive key for exact question lookup."""
    return " ".join(text.split()).casefold()


def format_options(choices: List[str]) -> str:
    # One option per line, so option text is flattened to a single line.
    return "\n".join(f"{choice_letter(i)}) {' '.join(c.split())}" for i, c in enumerate(choices))


def user_prompt(case: Case) -> str:
    if case.is_multiple_choice:
        return f"{CHOICE_INSTRUCTION}\n\n{case.question.strip()}\n\n{format_options(case.choices)}"
    return f"{case.question.strip()}\n\n{MATH_INSTRUCTION}"


def build_messages(case: Case, system_prompt: Optional[str] = None) -> List[Dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": user_prompt(case)})
    return messages


def last_user_text(messages) -> Optional[str]:
    """Text of the last user message; content may be a string or a list of parts."""
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            return "\n".join(parts)
        return None
    return None


def question_candidates(text: str) -> Iterator[str]:
    """Normalised keys to try, longest span of paragraphs first."""
    paragraphs = [p for p in _PARAGRAPH_BREAK.split(text) if p.strip()][:MAX_PARAGRAPHS]
    count = len(paragraphs)
    for length in range(count, 0, -1):
        for start in range(0, count - length + 1):
            yield normalise_text("\n\n".join(paragraphs[start:start + length]))


def parse_options(text: str) -> Dict[str, str]:
    """Letter -> normalised option text for lines like "B) text"."""
    options = {}
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if match:
            options[match.group(1)] = normalise_text(match.group(2))
    return options
