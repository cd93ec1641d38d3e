"""Command line of llama-server-simulator."""

import argparse
import sys
from pathlib import Path

from ..errors import UsageError
from ..questions.datasets import GPQA, KNOWN_DATASETS, SHIPPED, load_dataset_file, load_gpqa, load_shipped
from .index import QuestionIndex
from .server import Simulator, SimulatorConfig, make_server

PROG = "llama-server-simulator"


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog=PROG, description="Simulated OpenAI-compatible server that answers "
                                                       "dataset questions right with a given probability.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8033, help="0 picks a free port (default 8033)")
    parser.add_argument("--dataset", default=",".join(sorted(SHIPPED)),
                        help="shipped dataset(s) to answer, comma separated (default: all shipped)")
    parser.add_argument("--gpqa-file", help="GPQA CSV/JSONL to answer as well")
    parser.add_argument("--dataset-file", help="a JSONL dataset to answer as well")
    parser.add_argument("--dataset-name", help="name for --dataset-file (default: its file name)")
    parser.add_argument("--question-field", default="question")
    parser.add_argument("--answer-field", default="answer")
    parser.add_argument("--choices-field")
    parser.add_argument("--success-rate", type=_rate, default=0.8, help="probability of a right answer")
    parser.add_argument("--error-rate", type=_rate, default=0.0, help="probability of an HTTP 503 reply")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay added to every completion")
    parser.add_argument("--model", default="simulated-model", help="model id reported by /v1/models")
    parser.add_argument("--api-key", help="require 'Authorization: Bearer KEY'")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return parser


def load_all_cases(args):
    cases = []
    for name in [n.strip() for n in args.dataset.split(",") if n.strip()]:
        if name == GPQA:
            if not args.gpqa_file:
                raise UsageError("gpqa is not shipped; pass --gpqa-file PATH")
            continue
        if name not in SHIPPED:
            raise UsageError(f"unknown dataset {name!r}; known: {', '.join(KNOWN_DATASETS)}")
        cases += load_shipped(name)
    if args.gpqa_file:
        cases += load_gpqa(Path(args.gpqa_file))
    if args.dataset_file:
        name = args.dataset_name or Path(args.dataset_file).stem
        cases += load_dataset_file(Path(args.dataset_file), name, args.question_field, args.answer_field,
                                   args.choices_field)
    if not cases:
        raise UsageError("no questions loaded")
    return cases


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        simulator = Simulator(QuestionIndex(load_all_cases(args)),
                              SimulatorConfig(args.success_rate, args.seed, args.latency_ms, args.error_rate,
                                              args.model, args.api_key, args.verbose))
        try:
            server = make_server(args.host, args.port, simulator)
        except OSError as err:
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {err.strerror}") from None
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    print(f"loaded {len(simulator.index)} questions", file=sys.stderr)
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
