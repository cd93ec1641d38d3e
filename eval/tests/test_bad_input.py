"""Every wrong input ends with one clear line on stderr and exit status 2."""

import pytest

from conftest import run_eval
from llama_eval.cli import main

SERVER = ("--server", "http://127.0.0.1:9")  # never contacted: input errors come first


def write(path, text):
    path.write_text(text)
    return str(path)


BAD_INPUTS = [
    ((*SERVER, "--dataset", "nosuch"), "unknown dataset 'nosuch'"),
    ((*SERVER, "--dataset", "gpqa"), "--gpqa-file"),
    ((*SERVER, "--gpqa-file", "{tmp}/missing.csv"), "cannot read GPQA file"),
    ((*SERVER, "--dataset-file", "{tmp}/missing.jsonl", "--question-field", "q", "--answer-field", "a"),
     "cannot read dataset file"),
    ((*SERVER, "--dataset-file", "{broken}", "--question-field", "q", "--answer-field", "a"),
     "broken.jsonl:2: malformed JSON"),
    ((*SERVER, "--dataset-file", "{broken}"), "needs --question-field and --answer-field"),
    ((*SERVER, "--dataset-file", "{good}", "--question-field", "question", "--answer-field", "nope"),
     "good.jsonl:1: missing field 'nope'"),
    (("--server", "http://127.0.0.1:9,http://127.0.0.1:10", "--threads", "1,2,3", "--dataset", "gsm8k"),
     "--threads has 3 value(s) for 2 server(s)"),
    (("--server", "http://127.0.0.1:9,http://127.0.0.1:10", "--server-name", "a", "--dataset", "gsm8k"),
     "--server-name has 1 name(s) for 2 server(s)"),
    ((*SERVER, "--threads", "0", "--dataset", "gsm8k"), "--threads must be positive"),
    ((*SERVER, "--threads", "four", "--dataset", "gsm8k"), "--threads must be integers"),
    (("--server", "localhost:8080", "--dataset", "gsm8k"), "bad server URL"),
    (("--server", "ftp://host:21", "--dataset", "gsm8k"), "bad server URL"),
    (("--server", "http://", "--dataset", "gsm8k"), "bad server URL"),
    (("--server", "http://host:port", "--dataset", "gsm8k"), "invalid port"),
    (("--dataset", "gsm8k"), "no server given"),
    (SERVER, "no dataset given"),
    ((*SERVER, "--dataset", "gsm8k", "--n-cases", "0"), "positive integer"),
    ((*SERVER, "--dataset", "gsm8k", "--n_cases", "ten"), "positive integer"),
    ((*SERVER, "--dataset", "gsm8k", "--temperature", "-1"), "--temperature"),
    ((*SERVER, "--dataset", "gsm8k", "--top-p", "1.5"), "--top-p"),
    ((*SERVER, "--dataset", "gsm8k", "--no-such-flag"), "unrecognized arguments"),
    ((*SERVER, "--dataset", "gsm8k", "--grader", "cli"), "--grader-script"),
    ((*SERVER, "--dataset", "gsm8k", "--grader", "cli", "--grader-script", "{tmp}/nope.sh"), "does not exist"),
    (("--dataset", "gsm8k", "--grader", "llm"), "--judge-server"),
    ((*SERVER, "--dataset", "gsm8k", "--grader", "llm", "--judge-server", "judge:1"), "bad server URL"),
    ((*SERVER, "--dataset", "gsm8k", "--grader", "fuzzy"), "invalid choice"),
    ((*SERVER, "--dataset", "gsm8k", "--grader", "mc"), "needs choices"),
    ((*SERVER, "--dataset", "gsm8k", "--output", "{tmp}/no/such/dir/s.json"), "does not exist"),
    ((*SERVER, "--dataset", "gsm8k", "--output", "{tmp}"), "is a directory"),
    (("--resume", "--output", "{tmp}/missing.json"), "does not exist"),
    (("--resume", "--output", "{broken}"), "not valid JSON"),
    (("--compare", "{tmp}/a.json"), "expected 2 arguments"),
]


@pytest.mark.parametrize("argv,message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, message):
    values = {"tmp": str(tmp_path),
              "broken": write(tmp_path / "broken.jsonl", '{"q": "a", "a": "1"}\n{"q": "b", "a": \n'),
              "good": write(tmp_path / "good.jsonl", '{"question": "a", "answer": "1"}\n')}
    argv = [arg.format(**values) for arg in argv]
    before = set(tmp_path.iterdir())
    assert main(["--no-progress", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llama-eval: error: "), captured.err
    assert message in lines[0]
    assert set(tmp_path.iterdir()) == before  # nothing written


def test_bad_input_as_a_process_has_status_2_and_no_traceback(tmp_path):
    result = run_eval("--server", "nonsense", "--dataset", "gsm8k", "--output", str(tmp_path / "s.json"))
    assert result.returncode == 2
    assert result.stderr.strip() == "llama-eval: error: bad server URL 'nonsense': expected http://HOST:PORT"


def test_simulator_bad_input_exits_2(tmp_path):
    import subprocess
    from conftest import PYTHON, SIMULATOR_SCRIPT
    for argv, message in ((["--dataset", "nosuch"], "unknown dataset"),
                          (["--success-rate", "2"], "--success-rate"),
                          (["--dataset", "gpqa"], "--gpqa-file")):
        result = subprocess.run([PYTHON, str(SIMULATOR_SCRIPT), "--port", "0", *argv], capture_output=True,
                                text=True, timeout=30)
        assert result.returncode == 2 and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
