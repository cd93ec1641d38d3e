"""The state file: configuration, every task's record, and summaries.

It is rewritten whole, atomically (temp file in the same directory, fsync,
rename), under a lock, so concurrent workers and a crash at any instant leave
either the previous or the next complete version on disk, never a torn one.
"""

import json
import os
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List

from .errors import UsageError
from .report.summary import summarise
from .tasks import DONE

FORMAT = "llama-eval-state"
VERSION = 1


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync directories; the rename is still atomic
    finally:
        os.close(fd)


def _default_file_mode() -> int:
    # mkstemp creates 0600 files; a state file should get the usual umask-based mode.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _default_file_mode()


def write_json_atomic(path: Path, obj) -> None:
    path = Path(path)
    text = json.dumps(obj, ensure_ascii=False, indent=1)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        try:
            os.unlink(temp_name)
        except OSError:
            pass
        raise
    _fsync_directory(path.parent)


def remove_stale_temp_files(path: Path) -> None:
    """Temp files a killed run left next to the state file."""
    for stale in Path(path).parent.glob(f".{Path(path).name}.*.tmp"):
        try:
            stale.unlink()
        except OSError:
            pass


def read_state(path: Path) -> Dict:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read state file {path}: {err.strerror}") from None
    try:
        state = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"state file {path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT or not isinstance(state.get("tasks"), dict):
        raise UsageError(f"{path} is not a llama-eval state file")
    if state.get("version") != VERSION:
        raise UsageError(f"state file {path} has version {state.get('version')}; this tool reads version {VERSION}")
    return state


class StateStore:
    def __init__(self, path: Path, state: Dict, save_interval_s: float = 1.0):
        self.path = Path(path)
        self.state = state
        self.save_interval_s = save_interval_s
        self._lock = threading.Lock()
        self._last_save = 0.0
        self._dirty = False

    @classmethod
    def create(cls, path: Path, config: Dict, tasks: List[Dict], save_interval_s: float = 1.0) -> "StateStore":
        state = {"format": FORMAT, "version": VERSION, "created": now_iso(), "updated": now_iso(),
                 "config": config, "runs": [], "tasks": {t["id"]: t for t in tasks}}
        return cls(path, state, save_interval_s)

    @classmethod
    def load(cls, path: Path, save_interval_s: float = 1.0) -> "StateStore":
        remove_stale_temp_files(path)
        return cls(path, read_state(path), save_interval_s)

    @property
    def config(self) -> Dict:
        return self.state["config"]

    @property
    def run_index(self) -> int:
        return len(self.state["runs"]) - 1

    def begin_run(self, servers: List[Dict]) -> None:
        with self._lock:
            self.state["runs"].append({"started": now_iso(), "finished": None, "servers": servers})
        self.save(force=True)

    def end_run(self, outcome: str, removed_servers: List[str] = ()) -> None:
        with self._lock:
            self.state["runs"][-1].update(finished=now_iso(), outcome=outcome, removed_servers=list(removed_servers))
        self.save(force=True)

    def unfinished_ids(self) -> List[str]:
        with self._lock:
            return [tid for tid, task in self.state["tasks"].items() if task.get("status") != DONE]

    def task(self, tid: str) -> Dict:
        with self._lock:
            return dict(self.state["tasks"][tid])

    def tasks(self) -> List[Dict]:
        with self._lock:
            return [dict(t) for t in self.state["tasks"].values()]

    def update_task(self, tid: str, fields: Dict) -> None:
        with self._lock:
            self.state["tasks"][tid].update(fields)
            self._dirty = True
        self.save()

    def save(self, force: bool = False) -> None:
        with self._lock:
            if not force and (not self._dirty or time.monotonic() - self._last_save < self.save_interval_s):
                return
            self.state["updated"] = now_iso()
            tasks = self.state.pop("tasks")
            self.state.update(summarise(list(tasks.values())))
            self.state["tasks"] = tasks  # keeps the big part at the end of the file
            write_json_atomic(self.path, self.state)
            self._last_save = time.monotonic()
            self._dirty = False

    def snapshot(self) -> Dict:
        with self._lock:
            return json.loads(json.dumps(self.state))
