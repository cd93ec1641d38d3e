"""Exact lookup of dataset questions inside chat requests.

Keys are normalised question texts (whitespace collapsed, case folded), built
once at start; a request is matched by trying spans of paragraphs of its last
user message as keys (see llama_eval.prompts), so a prompt template around the
question does not matter and no fuzzy scan is needed."""

from typing import Dict, Iterable, Optional

from ..questions.cases import Case
from ..questions.prompts import normalise_text, question_candidates


class QuestionIndex:
    def __init__(self, cases: Iterable[Case]):
        self._by_text: Dict[str, Case] = {}
        for case in cases:
            # First one wins: the same question in two datasets keeps one reference.
            self._by_text.setdefault(normalise_text(case.question), case)

    def __len__(self) -> int:
        return len(self._by_text)

    def find(self, user_text: str) -> Optional[Case]:
        for key in question_candidates(user_text):
            case = self._by_text.get(key)
            if case is not None:
                return case
        return None
