"""Dataset loading, deterministic case sampling, and prompt/question round trips."""

import json

import pytest

from conftest import gpqa_rows, write_gpqa_csv
from llama_eval.grading.answers import numeric_value
from llama_eval.questions.datasets import load_dataset_file, load_gpqa, load_shipped, sample_cases
from llama_eval.errors import UsageError
from llama_eval.questions.prompts import build_messages, parse_options, user_prompt
from llama_eval.simulator.index import QuestionIndex


@pytest.mark.parametrize("name,count", [("aime2024", 30), ("aime2025", 30), ("gsm8k", 1319), ("math500", 500)])
def test_shipped_datasets_load_completely(name, count):
    cases = load_shipped(name)
    assert len(cases) == count
    assert len({c.case_id for c in cases}) == count
    assert all(c.question and c.reference for c in cases)


def test_gsm8k_references_are_final_numbers():
    cases = load_shipped("gsm8k")
    assert all(numeric_value(c.reference) is not None for c in cases)
    assert any("," in c.reference for c in cases) and any(c.reference.startswith("-") for c in cases)
    assert cases[0].reference == "18"


def test_aime_answers_are_integers_including_zero_padded():
    for name in ("aime2024", "aime2025"):
        values = [numeric_value(c.reference) for c in load_shipped(name)]
        assert all(v is not None and v.denominator == 1 and 0 <= v <= 999 for v in values)


def test_sampling_is_deterministic_and_seed_dependent():
    cases = load_shipped("gsm8k")
    first = [c.case_id for c in sample_cases(cases, 20, seed=1)]
    again = [c.case_id for c in sample_cases(cases, 20, seed=1)]
    other = [c.case_id for c in sample_cases(cases, 20, seed=2)]
    assert first == again and first != other
    assert len(set(first)) == 20
    assert first == sorted(first, key=lambda cid: int(cid.split(":")[1]))  # file order kept
    assert len(sample_cases(cases, 5000, seed=1)) == 1319


def test_gpqa_csv_is_shuffled_deterministically(tmp_path):
    path = tmp_path / "gpqa.csv"
    write_gpqa_csv(path, gpqa_rows(40))
    cases = load_gpqa(path)
    assert len(cases) == 40 and cases[3].source_id == "rec3"
    letters = {c.reference for c in cases}
    assert len(letters) >= 3  # the correct option is not always first
    for case in cases:
        assert case.choices[ord(case.reference) - ord("A")].startswith("right")
    assert [c.choices for c in load_gpqa(path)] == [c.choices for c in cases]


def test_gpqa_jsonl_with_same_columns(tmp_path):
    path = tmp_path / "gpqa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in gpqa_rows(3)) + "\n")
    assert [c.reference for c in load_gpqa(path)] == [c.reference for c in load_gpqa_csv_copy(tmp_path)]


def load_gpqa_csv_copy(tmp_path):
    path = tmp_path / "copy.csv"
    write_gpqa_csv(path, gpqa_rows(3))
    return load_gpqa(path)


def test_gpqa_missing_columns_are_reported(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("Question,Answer\nq,a\n")
    with pytest.raises(UsageError, match="Correct Answer"):
        load_gpqa(path)


def test_dataset_file_field_mapping_and_choice_answers(tmp_path):
    path = tmp_path / "custom.jsonl"
    rows = [
        {"q": {"text": "Pick the colour of the sky."}, "opts": ["green", "blue", "red"], "gold": "blue"},
        {"q": {"text": "Pick the third."}, "opts": ["x", "y", "z"], "gold": "C"},
        {"q": {"text": "Pick the first."}, "opts": {"A": "p", "B": "q"}, "gold": 0},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    cases = load_dataset_file(path, "custom", "q.text", "gold", "opts")
    assert [c.reference for c in cases] == ["B", "C", "A"]
    assert cases[0].case_id == "custom:0" and cases[2].choices == ["p", "q"]


def test_malformed_jsonl_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": \n')
    with pytest.raises(UsageError, match=r"broken\.jsonl:3: malformed JSON"):
        load_dataset_file(path, "broken", "question", "answer")


def test_missing_field_is_reported_with_its_line(tmp_path):
    path = tmp_path / "nofield.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n{"question": "b"}\n')
    with pytest.raises(UsageError, match=r"nofield\.jsonl:2: missing field 'answer'"):
        load_dataset_file(path, "nofield", "question", "answer")


def test_every_shipped_prompt_leads_back_to_its_case():
    cases = [c for name in ("aime2024", "math500") for c in load_shipped(name)]
    index = QuestionIndex(cases)
    for case in cases:
        assert index.find(user_prompt(case)) is case


def test_question_is_found_inside_other_templates():
    case = load_shipped("gsm8k")[5]
    index = QuestionIndex(load_shipped("gsm8k"))
    wrapped = f"You are a careful solver.\n\n  {case.question.upper()}  \n\nShow your work.\nEnd with the number."
    assert index.find(wrapped) == case
    assert index.find("Something that is not in any dataset at all.") is None


def test_multiple_choice_prompt_lists_flattened_options(tmp_path):
    path = tmp_path / "gpqa.csv"
    write_gpqa_csv(path, gpqa_rows(1))
    case = load_gpqa(path)[0]
    messages = build_messages(case, system_prompt="Be brief.")
    assert messages[0] == {"role": "system", "content": "Be brief."}
    options = parse_options(messages[1]["content"])
    assert sorted(options) == ["A", "B", "C", "D"]
    assert options[case.reference] == "right 0 (multi-line)"
