"""Loading evaluation datasets from local files into Case lists.

Shipped datasets live in eval/data/<name>/test.jsonl. GPQA is never shipped
(its authors ask that it not be republished in plain text), so it is only read
from a path the user gives. Any other JSONL file can be used with a field map.
"""

import csv
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..errors import UsageError
from .cases import Case, choice_letter

DATA_DIR = Path(__file__).resolve().parents[2] / "data"


def _gsm8k_final_answer(solution: str) -> str:
    # GSM8K solutions end with "#### <answer>"; the gold answer is what follows it.
    return solution.rsplit("####", 1)[-1].strip()


@dataclass(frozen=True)
class ShippedDataset:
    directory: str
    question_field: str
    answer_field: str
    id_field: Optional[str] = None
    answer_transform: Callable[[str], str] = str.strip


SHIPPED: Dict[str, ShippedDataset] = {
    "aime2024": ShippedDataset("aime2024", "problem", "answer", "id"),
    "aime2025": ShippedDataset("aime2025", "problem", "answer", "id"),
    "gsm8k": ShippedDataset("gsm8k", "question", "answer", None, _gsm8k_final_answer),
    "math500": ShippedDataset("math500", "problem", "answer", "unique_id"),
}
GPQA = "gpqa"
KNOWN_DATASETS = sorted(SHIPPED) + [GPQA]
DEFAULT_GRADER = {name: "regex" for name in SHIPPED}
DEFAULT_GRADER[GPQA] = "mc"

# Column names of the official GPQA CSV (gpqa_diamond.csv); JSONL copies use the same keys.
GPQA_QUESTION = "question"
GPQA_CORRECT = "correct answer"
GPQA_INCORRECT = ("incorrect answer 1", "incorrect answer 2", "incorrect answer 3")
GPQA_ID = "record id"


def read_jsonl(path: Path) -> Iterator[Tuple[int, dict]]:
    """Yields (1-based line number, object); blank lines are skipped."""
    try:
        handle = open(path, encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read dataset file {path}: {err.strerror}") from None
    with handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise UsageError(f"{path}:{line_no}: malformed JSON line: {err.msg}") from None
            if not isinstance(obj, dict):
                raise UsageError(f"{path}:{line_no}: expected a JSON object, got {type(obj).__name__}")
            yield line_no, obj


def get_field(obj: dict, dotted: str, where: str):
    """Looks up a field by a dotted path ("prompt.0.value"); list steps are integers."""
    value = obj
    for step in dotted.split("."):
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.lstrip("-").isdigit() and -len(value) <= int(step) < len(value):
            value = value[int(step)]
        else:
            raise UsageError(f"{where}: missing field '{dotted}'")
    return value


def _as_text(value, what: str, where: str) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        raise UsageError(f"{where}: field {what} must be a string or number")
    return str(value).strip()


def load_shipped(name: str) -> List[Case]:
    spec = SHIPPED[name]
    path = DATA_DIR / spec.directory / "test.jsonl"
    cases = []
    for index, (line_no, row) in enumerate(read_jsonl(path)):
        where = f"{path}:{line_no}"
        source_id = row.get(spec.id_field) if spec.id_field else None
        answer = _as_text(get_field(row, spec.answer_field, where), spec.answer_field, where)
        cases.append(Case(
            case_id=f"{name}:{index}",
            dataset=name,
            question=_as_text(get_field(row, spec.question_field, where), spec.question_field, where),
            reference=spec.answer_transform(answer),
            source_id=None if source_id is None else str(source_id),
        ))
    return cases


def _shuffled_options(question: str, correct: str, incorrect: List[str]) -> Tuple[List[str], str]:
    # The raw data lists the correct option first; shuffle with a seed derived from the
    # question text so the order is the same in every run and in the simulator.
    options = [correct] + incorrect
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()
    random.Random(digest).shuffle(options)
    return options, choice_letter(options.index(correct))


def _gpqa_case(row: dict, index: int, where: str, name: str) -> Case:
    keys = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    missing = [c for c in (GPQA_QUESTION, GPQA_CORRECT) + GPQA_INCORRECT if c not in keys]
    if missing:
        raise UsageError(f"{where}: GPQA row lacks column(s) {', '.join(repr(m) for m in missing)} "
                         f"(expected: Question, Correct Answer, Incorrect Answer 1..3)")
    question = _as_text(keys[GPQA_QUESTION], "Question", where)
    correct = _as_text(keys[GPQA_CORRECT], "Correct Answer", where)
    incorrect = [_as_text(keys[c], c, where) for c in GPQA_INCORRECT]
    options, letter = _shuffled_options(question, correct, incorrect)
    record_id = keys.get(GPQA_ID)
    return Case(f"{name}:{index}", name, question, letter, options,
                None if record_id in (None, "") else str(record_id).strip())


def _read_csv_rows(path: Path) -> Iterator[Tuple[int, dict]]:
    try:
        handle = open(path, encoding="utf-8", newline="")
    except OSError as err:
        raise UsageError(f"cannot read GPQA file {path}: {err.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        try:
            for row in reader:
                yield reader.line_num, row
        except csv.Error as err:
            raise UsageError(f"{path}:{reader.line_num}: malformed CSV: {err}") from None


def load_gpqa(path: Path, name: str = GPQA) -> List[Case]:
    path = Path(path)
    rows = _read_csv_rows(path) if path.suffix.lower() == ".csv" else read_jsonl(path)
    cases = [_gpqa_case(row, index, f"{path}:{line_no}", name) for index, (line_no, row) in enumerate(rows)]
    if not cases:
        raise UsageError(f"GPQA file {path} holds no questions")
    return cases


def _choices_from(value, where: str) -> List[str]:
    if isinstance(value, dict):
        return [_as_text(value[k], f"choice {k}", where) for k in sorted(value)]
    if isinstance(value, list) and value:
        return [_as_text(v, "choice", where) for v in value]
    raise UsageError(f"{where}: choices must be a non-empty list or an object keyed by letter")


def _choice_reference(answer, choices: List[str], where: str) -> str:
    """Accepts a letter, a 0-based index or the text of the correct choice."""
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices):
        return choice_letter(answer)
    text = _as_text(answer, "answer", where)
    letters = [choice_letter(i) for i in range(len(choices))]
    stripped = text.strip("() .").upper()
    if stripped in letters:
        return stripped
    normalised = [" ".join(c.split()).lower() for c in choices]
    if " ".join(text.split()).lower() in normalised:
        return letters[normalised.index(" ".join(text.split()).lower())]
    raise UsageError(f"{where}: answer {text!r} is neither a choice letter, an index nor a choice text")


def load_dataset_file(path: Path, name: str, question_field: str, answer_field: str,
                      choices_field: Optional[str] = None) -> List[Case]:
    path = Path(path)
    cases = []
    for index, (line_no, row) in enumerate(read_jsonl(path)):
        where = f"{path}:{line_no}"
        question = _as_text(get_field(row, question_field, where), question_field, where)
        answer = get_field(row, answer_field, where)
        choices = _choices_from(get_field(row, choices_field, where), where) if choices_field else None
        reference = _choice_reference(answer, choices, where) if choices else _as_text(answer, answer_field, where)
        cases.append(Case(f"{name}:{index}", name, question, reference, choices))
    if not cases:
        raise UsageError(f"dataset file {path} holds no questions")
    return cases


def sample_cases(cases: List[Case], n_cases: Optional[int], seed: int) -> List[Case]:
    """A deterministic sample of n_cases (all when None), kept in file order."""
    if n_cases is None or n_cases >= len(cases):
        return list(cases)
    dataset = cases[0].dataset if cases else ""
    chosen = sorted(random.Random(f"{seed}:{dataset}").sample(range(len(cases)), n_cases))
    return [cases[i] for i in chosen]
