#!/usr/bin/env python3
"""llama-eval: accuracy of OpenAI-compatible LLM servers on math and
multiple-choice datasets. See eval/README.md."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from llama_eval.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
