"""A task is one attempt at one case (case x repeat): its stored record and
the request sent for it."""

from typing import Dict, Optional

from .questions.cases import Case
from .questions.prompts import build_messages

PENDING, DONE, ERROR = "pending", "done", "error"
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_tokens")


def task_id(case_id: str, repeat: int) -> str:
    return f"{case_id}#{repeat}"


def new_task(case: Case, repeat: int, grader: str, system_prompt: Optional[str]) -> Dict:
    return {
        "id": task_id(case.case_id, repeat),
        "case_id": case.case_id,
        "dataset": case.dataset,
        "repeat": repeat,
        "source_id": case.source_id,
        "question": case.question,
        "reference": case.reference,
        "choices": case.choices,
        "grader": grader,
        "messages": build_messages(case, system_prompt),
        "status": PENDING,
    }


def request_payload(task: Dict, config: Dict, model: Optional[str]) -> Dict:
    """The chat request for a task. The seed differs per repeat so repeats are
    independent samples, yet the same on every server and every rerun."""
    payload = {"messages": task["messages"]}
    if model:
        payload["model"] = model
    sampling = config.get("sampling", {})
    for key in SAMPLING_KEYS:
        if sampling.get(key) is not None:
            payload[key] = sampling[key]
    seed = sampling.get("seed")
    if seed is not None and seed >= 0:
        payload["seed"] = seed + task["repeat"]
    return payload
