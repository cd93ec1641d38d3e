#!/usr/bin/env python3
"""llama-server-simulator: an OpenAI-compatible server that answers dataset
questions correctly with a chosen probability. See eval/README.md."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from llama_eval.simulator.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
