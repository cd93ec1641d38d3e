"""Deciding whether a response answers a task correctly.

regex: extract the final answer (\\boxed{}, else last number) and compare it
       with the reference as a number or as normalised LaTeX.
mc:    extract an option letter and compare it with the reference letter.
cli:   an external program decides (exit status 0 = correct).
llm:   a judge model on another server decides whether the answers are equivalent.
"""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..http_client import ChatClient, RequestFailure
from .answers import answers_equivalent, extract_answer, extract_choice, last_boxed

GRADER_NAMES = ("regex", "mc", "cli", "llm")
RESPONSE_TAIL_CHARS = 2000  # what a judge sees of a response with no extractable answer


class GradingError(Exception):
    """The grader could not reach a verdict (script crashed, judge unclear)."""


@dataclass
class Verdict:
    correct: bool
    extracted: Optional[str]
    detail: str = ""


def _n_choices(task: dict) -> int:
    return len(task.get("choices") or []) or 4


def extract_for_task(task: dict, response: str) -> Optional[str]:
    if task.get("choices"):
        return extract_choice(response, _n_choices(task))
    return extract_answer(response)


class RegexGrader:
    name = "regex"

    def grade(self, task: dict, response: str) -> Verdict:
        extracted = extract_answer(response)
        return Verdict(answers_equivalent(extracted, task["reference"]), extracted)


class ChoiceGrader:
    name = "mc"

    def grade(self, task: dict, response: str) -> Verdict:
        extracted = extract_choice(response, _n_choices(task))
        return Verdict(extracted is not None and extracted == task["reference"].strip().upper(), extracted)


def script_command(script: str) -> list:
    """How to run a grader script; checked once at start so a typo fails fast."""
    path = Path(script)
    if not path.is_file():
        raise UsageError(f"grader script {script} does not exist")
    if os.access(path, os.X_OK):
        return [str(path.resolve())]
    if path.suffix == ".py":
        return [sys.executable, str(path.resolve())]
    raise UsageError(f"grader script {script} is not executable (chmod +x it)")


class ScriptGrader:
    """Runs `SCRIPT PREDICTED REFERENCE`; the question and full response are in
    the environment (LLAMA_EVAL_QUESTION, LLAMA_EVAL_RESPONSE)."""
    name = "cli"

    def __init__(self, script: str, timeout_s: float = 60.0):
        self.command = script_command(script)
        self.timeout_s = timeout_s

    def grade(self, task: dict, response: str) -> Verdict:
        extracted = extract_for_task(task, response)
        env = dict(os.environ, LLAMA_EVAL_QUESTION=task.get("question", ""), LLAMA_EVAL_RESPONSE=response,
                   LLAMA_EVAL_TASK_ID=task.get("id", ""))
        try:
            result = subprocess.run(self.command + [extracted or "", task["reference"]], env=env,
                                    capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise GradingError(f"grader script ran longer than {self.timeout_s:g} s") from None
        except OSError as err:
            raise GradingError(f"grader script could not run: {err}") from None
        detail = (result.stdout.strip() or result.stderr.strip())[:500]
        return Verdict(result.returncode == 0, extracted, detail)


JUDGE_PROMPT = """You are checking an answer to a problem against the reference answer.
Decide whether the candidate's final answer is equivalent to the reference answer.
Ignore formatting, units, and how the answer was reached; only the final value matters.

Problem:
{question}

Reference answer: {reference}
Candidate answer: {candidate}

Reply with one word: Yes if they are equivalent, No if they are not."""

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S | re.I)
_POSITIVE = {"yes", "correct", "equivalent", "true", "same", "equal"}
_NEGATIVE = {"no", "incorrect", "not equivalent", "false", "different", "not correct", "not equal", "wrong"}
_VERDICT_WORD = re.compile(r"\b(not\s+equivalent|not\s+correct|not\s+equal|incorrect|equivalent|correct|"
                           r"different|wrong|equal|same|true|false|yes|no)\b", re.I)
_LABELLED = re.compile(r"(?:verdict|judgement|judgment|final answer|answer)\s*[:=]\s*(\S+(?:\s+\S+)?)", re.I)


def _word_verdict(word: str) -> Optional[bool]:
    word = " ".join(word.lower().split())
    if word in _POSITIVE:
        return True
    if word in _NEGATIVE:
        return False
    return None


def _first_verdict_word(text: str) -> Optional[bool]:
    match = _VERDICT_WORD.search(text)
    return _word_verdict(match.group(1)) if match else None


def parse_judge_verdict(text: str) -> Optional[bool]:
    """Yes/no from a judge reply, tolerant of reasoning, markdown and labels.
    Order: an explicit label ("Verdict: No"), \\boxed{}, the first word, the last verdict word."""
    if not text:
        return None
    body = _THINK_BLOCK.sub(" ", text)
    if "</think>" in body:  # reasoning whose opening tag was in the template
        body = body.rsplit("</think>", 1)[1]
    body = body.replace("*", " ").replace("_", " ").replace("#", " ").strip()
    labelled = list(_LABELLED.finditer(body))
    for candidate in ([labelled[-1].group(1)] if labelled else []) + [last_boxed(body) or ""]:
        verdict = _first_verdict_word(candidate)
        if verdict is not None:
            return verdict
    first = re.match(r"\W*(\w+(?:\s+\w+)?)", body)
    if first:
        leading = _VERDICT_WORD.match(first.group(1))
        if leading:
            return _word_verdict(leading.group(1))
    words = _VERDICT_WORD.findall(body)
    return _word_verdict(words[-1]) if words else None


class JudgeGrader:
    name = "llm"

    def __init__(self, client: ChatClient, model: Optional[str], max_tokens: Optional[int] = None):
        self.client = client
        self.model = model
        self.max_tokens = max_tokens

    def _reference_text(self, task: dict) -> str:
        reference = task["reference"]
        choices = task.get("choices")
        if choices and len(reference) == 1 and "A" <= reference <= chr(ord("A") + len(choices) - 1):
            return f"{reference}) {choices[ord(reference) - ord('A')]}"
        return reference

    def grade(self, task: dict, response: str) -> Verdict:
        extracted = extract_for_task(task, response)
        candidate = extracted if extracted is not None else response[-RESPONSE_TAIL_CHARS:]
        prompt = JUDGE_PROMPT.format(question=task.get("question", ""), reference=self._reference_text(task),
                                     candidate=candidate)
        payload = {"messages": [{"role": "user", "content": prompt}], "temperature": 0}
        if self.model:
            payload["model"] = self.model
        if self.max_tokens:
            payload["max_tokens"] = self.max_tokens
        try:
            reply = self.client.complete(payload).content
        except RequestFailure as failure:
            raise GradingError(f"judge request failed: {failure}") from None
        verdict = parse_judge_verdict(reply)
        if verdict is None:
            raise GradingError(f"judge gave no yes/no verdict: {reply[:200]!r}")
        return Verdict(verdict, extracted, reply.strip()[:500])

