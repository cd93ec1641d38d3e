"""The simulator's HTTP behaviour and its answers."""

import json
import random

import pytest
import requests

from conftest import SimulatorProcess
from llama_eval.questions.datasets import SHIPPED, load_shipped
from llama_eval.grading.graders import RegexGrader
from llama_eval.questions.prompts import build_messages, user_prompt
from llama_eval.simulator.responses import decide


@pytest.fixture(scope="module")
def sim():
    process = SimulatorProcess("--success-rate", "0.5", "--seed", "11", "--dataset", "gsm8k,aime2025",
                               "--api-key", "sekrit", "--model", "sim-1")
    yield process
    process.kill()


AUTH = {"Authorization": "Bearer sekrit"}


def chat(sim, body, headers=AUTH, **kwargs):
    return requests.post(f"{sim.url}/v1/chat/completions", data=body if isinstance(body, (str, bytes))
                         else json.dumps(body), headers=headers, timeout=10, **kwargs)


def question(index=0, dataset="gsm8k"):
    return load_shipped(dataset)[index]


def test_health_and_models(sim):
    assert requests.get(f"{sim.url}/health", timeout=5).json() == {"status": "ok"}
    models = requests.get(f"{sim.url}/v1/models", headers=AUTH, timeout=5).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "sim-1"


def test_api_key_is_required(sim):
    response = chat(sim, {"messages": build_messages(question())}, headers={})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_completion_shape_and_usage(sim):
    response = chat(sim, {"messages": build_messages(question(3)), "seed": 1})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and "\\boxed{" in message["content"]
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10 and usage["completion_tokens"] > 10
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_unknown_question_is_an_openai_style_404(sim):
    response = chat(sim, {"messages": [{"role": "user", "content": "What is the airspeed of a swallow?"}]})
    assert response.status_code == 404
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["code"] == 404


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", json.dumps({"messages": "hi"}), json.dumps({})])
def test_malformed_requests_are_400(sim, body):
    response = chat(sim, body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert requests.get(f"{sim.url}/health", timeout=5).status_code == 200  # still serving


def test_same_seed_same_answer_and_seeds_vary_outcomes(sim):
    messages = build_messages(question(7))
    first = chat(sim, {"messages": messages, "seed": 5}).json()["choices"][0]["message"]["content"]
    again = chat(sim, {"messages": messages, "seed": 5}).json()["choices"][0]["message"]["content"]
    assert first == again
    answers = {chat(sim, {"messages": messages, "seed": s}).json()["choices"][0]["message"]["content"]
               for s in range(12)}
    assert len(answers) > 1


def test_question_inside_last_user_message_of_a_conversation(sim):
    case = question(2, "aime2025")
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": [{"type": "text", "text": "Please solve:\n\n" + case.question}]}]
    assert chat(sim, {"messages": messages}).status_code == 200


def test_streaming_sends_sse_chunks_and_done(sim):
    body = {"messages": build_messages(question(4)), "seed": 2, "stream": True,
            "stream_options": {"include_usage": True}}
    response = chat(sim, body, stream=True)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    lines = [line for line in response.iter_lines(decode_unicode=True) if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    plain = chat(sim, dict(body, stream=False)).json()["choices"][0]["message"]["content"]
    assert text == plain
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert any(c["choices"] and c["choices"][0]["finish_reason"] == "stop" for c in chunks)


def test_max_tokens_truncates_with_length_finish_reason(sim):
    body = chat(sim, {"messages": build_messages(question(1)), "max_tokens": 5}).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] <= 5


def test_simulated_answers_grade_as_intended_on_every_shipped_case():
    # Right answers must grade right and wrong ones wrong, or measured accuracy
    # would not match --success-rate.
    grader = RegexGrader()
    for name in SHIPPED:
        for case in load_shipped(name):
            text = user_prompt(case)
            for rate, expected in ((1.0, True), (0.0, False)):
                decision = decide(case, text, rate, random.Random(case.case_id))
                verdict = grader.grade({"reference": case.reference}, decision["text"])
                assert verdict.correct is expected, (case.case_id, case.reference, decision["answer"])
