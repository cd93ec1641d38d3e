"""The unit of evaluation: one question with its reference answer."""

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass(frozen=True)
class Case:
    case_id: str            # "<dataset>:<row index>", stable across runs of the same file
    dataset: str
    question: str
    reference: str          # gold answer; a letter for multiple-choice cases
    choices: Optional[List[str]] = field(default=None)  # option texts, in the order shown as A, B, ...
    source_id: Optional[str] = None  # the dataset's own id, when it has one

    @property
    def is_multiple_choice(self) -> bool:
        return bool(self.choices)


def choice_letter(index: int) -> str:
    return chr(ord("A") + index)
