"""Command line of llama-eval: parse, dispatch, and turn every user error into
one line on stderr with exit status 2."""

import argparse
import signal
import sys
from pathlib import Path

from .errors import RunError, UsageError
from .grading.graders import GRADER_NAMES
from .plan import apply_judge_overrides, check_resume_conflicts, new_plan, request_settings, server_list
from .report.compare import compare_states, format_comparison
from .run import execute
from .state import StateStore, read_state, write_json_atomic

PROG = "llama-eval"
DEFAULT_OUTPUT = "llama-eval-state.json"


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _token_limit(text: str):
    """A positive reply limit, or -1 for none (None: nothing is sent)."""
    value = _int(text)
    if value == -1:
        return None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or -1, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float_range(low: float, high: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number in [{low:g}, {high:g}], got {text!r}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROG, description="Measure the accuracy of OpenAI-compatible LLM servers on math and "
                               "multiple-choice datasets.")
    servers = parser.add_argument_group("servers")
    servers.add_argument("--server", help="server URL(s), comma separated, e.g. http://127.0.0.1:8080")
    servers.add_argument("--server-name", help="display name per server, comma separated")
    servers.add_argument("--threads", help="parallel requests per server: one number for all, or one per server "
                                           "(default 8)")
    servers.add_argument("--model", help="model id sent with each request (default: the server's first model)")
    servers.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY' (never stored)")
    servers.add_argument("--timeout", type=_float_range(0.001, 1e9), help="seconds per request (default 600)")
    servers.add_argument("--retries", type=_non_negative_int, help="retries per request (default 3)")
    servers.add_argument("--retry-backoff", type=_float_range(0, 3600),
                         help="first retry delay in seconds, doubling each retry (default 1)")
    servers.add_argument("--max-server-failures", type=_positive_int,
                         help="consecutive failed requests after which a server is taken out of rotation "
                              "(default 3)")
    servers.add_argument("--stream", action="store_true", default=None, help="use streaming responses (SSE)")

    sampling = parser.add_argument_group("sampling (sent with every request)")
    sampling.add_argument("--temperature", type=_float_range(0, 100))
    sampling.add_argument("--top-p", type=_float_range(0, 1))
    sampling.add_argument("--top-k", type=_non_negative_int)
    sampling.add_argument("--min-p", type=_float_range(0, 1))
    sampling.add_argument("--max-tokens", "--n_predict", dest="max_tokens", type=_token_limit,
                          help="reply limit per request (-1: none, the peer tool's default)")
    sampling.add_argument("--seed", type=_int, help="request seed, plus the repeat index (default 42; "
                                                    "negative: send none)")
    sampling.add_argument("--system-prompt", help="system message placed before every question")

    data = parser.add_argument_group("datasets")
    data.add_argument("--dataset", help="shipped dataset(s): aime2024, aime2025, gsm8k, math500; gpqa needs "
                                        "--gpqa-file")
    data.add_argument("--gpqa-file", help="GPQA CSV or JSONL you downloaded (columns: Question, Correct Answer, "
                                          "Incorrect Answer 1..3)")
    data.add_argument("--dataset-file", help="any JSONL dataset (with --question-field, --answer-field)")
    data.add_argument("--dataset-name", help="name for --dataset-file (default: file name without extension)")
    data.add_argument("--question-field", help="field holding the question (dotted path allowed: a.b.0)")
    data.add_argument("--answer-field", help="field holding the reference answer")
    data.add_argument("--choices-field", help="field holding a list of options (makes the cases multiple choice)")
    data.add_argument("--n_cases", "--n-cases", dest="n_cases", type=_positive_int,
                      help="cases per dataset, sampled deterministically (default: all)")
    data.add_argument("--sample-seed", type=_int, help="seed for choosing the cases (default: --seed)")
    data.add_argument("--n-repeats", type=_positive_int, help="attempts per case (default 1)")

    grading = parser.add_argument_group("grading")
    grading.add_argument("--grader", "--grader-type", dest="grader", choices=GRADER_NAMES,
                         help="default: regex for math datasets, mc for multiple choice")
    grading.add_argument("--grader-script", help="for --grader cli: run as SCRIPT PREDICTED REFERENCE, "
                                                 "exit 0 = correct")
    grading.add_argument("--judge-server", "--grader-server", dest="judge_server",
                         help="for --grader llm: URL of the judge model's server (default: the first --server)")
    grading.add_argument("--judge-model", "--grader-model", dest="judge_model",
                         help="for --grader llm: judge model id (default: --model)")
    grading.add_argument("--judge-api-key", help="for --grader llm: API key of the judge server")
    grading.add_argument("--judge-max-tokens", type=_positive_int, help="for --grader llm: judge reply limit")

    output = parser.add_argument_group("output")
    output.add_argument("--output", default=DEFAULT_OUTPUT, help=f"state file (default {DEFAULT_OUTPUT})")
    output.add_argument("--resume", action="store_true",
                        help="continue --output: rerun unfinished and failed tasks with the stored configuration")
    output.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    output.add_argument("--log", help="per-task JSONL log (default: OUTPUT stem + .cases.jsonl)")
    output.add_argument("--html", help="write an HTML report with an accuracy chart")
    output.add_argument("--save-interval", type=_float_range(0, 3600), default=1.0,
                        help="at most this many seconds between state file writes (default 1; 0 = every result)")
    output.add_argument("--no-progress", action="store_true", help="no progress bar")
    output.add_argument("--verbose", action="store_true",
                        help="one line per finished task: its case, answer, reference and verdict")

    compare = parser.add_argument_group("comparing two runs")
    compare.add_argument("--compare", nargs=2, metavar=("STATE_A", "STATE_B"),
                         help="paired comparison of two state files; runs nothing")
    compare.add_argument("--compare-json", help="also write the comparison as JSON to this file")
    return parser


def run_compare(args) -> int:
    path_a, path_b = args.compare
    state_a, state_b = read_state(Path(path_a)), read_state(Path(path_b))
    result = compare_states(state_a, state_b)
    print(format_comparison(result, path_a, path_b))
    if args.compare_json:
        try:
            write_json_atomic(Path(args.compare_json), result)
        except OSError as err:
            raise UsageError(f"cannot write {args.compare_json}: {err.strerror}") from None
    return 0


def _check_output_path(output: Path) -> None:
    if output.is_dir():
        raise UsageError(f"--output {output} is a directory")
    if not output.parent.is_dir():
        raise UsageError(f"directory of --output {output} does not exist")


def run_eval(args) -> int:
    output = Path(args.output)
    _check_output_path(output)
    if args.resume:
        if not output.exists():
            raise UsageError(f"--resume: state file {output} does not exist")
        store = StateStore.load(output, args.save_interval)
        check_resume_conflicts(args, store.config)
        apply_judge_overrides(args, store.config)
        specs = server_list(args, store.state["runs"][-1]["servers"] if store.state["runs"]
                            else store.config["servers"]) if store.unfinished_ids() else []
        settings = request_settings(args, store.config.get("request"))
        return execute(store, specs, settings, args, resumed=True)
    if output.exists() and not args.overwrite:
        raise UsageError(f"{output} exists: use --resume to continue it or --overwrite to start over")
    config, tasks = new_plan(args)
    store = StateStore.create(output, config, tasks, args.save_interval)
    try:
        store.save(force=True)
    except OSError as err:
        raise UsageError(f"cannot write state file {output}: {err.strerror}") from None
    return execute(store, config["servers"], config["request"], args, resumed=False)


def _terminate_as_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    previous_handler = signal.signal(signal.SIGTERM, _terminate_as_interrupt)  # save state on kill too
    try:
        args = build_parser().parse_args(argv)
        if args.compare:
            return run_compare(args)
        return run_eval(args)
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except RunError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; finished tasks are saved, continue with --resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
