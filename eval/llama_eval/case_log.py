"""The per-task JSONL log: one line per finished or failed attempt, appended
and flushed as results arrive, so it can be tailed during a run."""

import json
import threading
from pathlib import Path
from typing import Dict

LEFT_OUT = ("messages", "choices")  # already in the state file; keeps lines short


class CaseLog:
    def __init__(self, path: Path, append: bool):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._handle = open(self.path, "a" if append else "w", encoding="utf-8")

    def write(self, task: Dict) -> None:
        line = json.dumps({k: v for k, v in task.items() if k not in LEFT_OUT}, ensure_ascii=False)
        with self._lock:
            self._handle.write(line + "\n")
            self._handle.flush()

    def close(self) -> None:
        with self._lock:
            self._handle.close()
