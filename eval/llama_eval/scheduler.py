"""Running tasks on several servers at once.

All servers' workers pull from one shared queue, so a faster server simply
takes more tasks. A server whose requests keep failing at the transport level
is taken out of rotation; the task it was working on goes back to the front of
the queue for the remaining servers. When no server is left, the run stops and
whatever is unfinished stays pending in the state file for --resume.
"""

import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from .grading.graders import GradingError
from .http_client import CLIENT, ChatClient, Completion, RequestFailure
from .state import StateStore, now_iso
from .tasks import DONE, ERROR


@dataclass
class Server:
    name: str
    url: str
    threads: int
    client: ChatClient
    model: Optional[str] = None
    max_failures: int = 3
    consecutive_failures: int = 0
    alive: bool = True


@dataclass
class RunOutcome:
    finished: int = 0
    errors: int = 0
    unfinished: int = 0
    removed_servers: List[str] = field(default_factory=list)
    all_servers_failed: bool = False
    last_error: str = ""


class TaskQueue:
    """Pending task ids plus a count of those in flight; workers wait here until
    there is work, the run is over, or their server has been removed."""

    def __init__(self, task_ids: List[str]):
        self._pending = deque(task_ids)
        self._in_flight = 0
        self._stopped = False
        self._cond = threading.Condition()

    def take(self, server: Server) -> Optional[str]:
        with self._cond:
            while True:
                if self._stopped or not server.alive:
                    return None
                if self._pending:
                    self._in_flight += 1
                    return self._pending.popleft()
                if self._in_flight == 0:
                    return None
                self._cond.wait()

    def finish(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def give_back(self, tid: str) -> None:
        with self._cond:
            self._in_flight -= 1
            self._pending.appendleft(tid)
            self._cond.notify_all()

    def wake_all(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def remaining(self) -> int:
        with self._cond:
            return len(self._pending) + self._in_flight


def _completion_fields(completion: Completion) -> Dict:
    return {"response": completion.content, "reasoning": completion.reasoning,
            "finish_reason": completion.finish_reason, "usage": completion.usage,
            "latency_s": round(completion.latency_s, 4),
            "ttft_s": None if completion.ttft_s is None else round(completion.ttft_s, 4),
            "model": completion.model}


class Runner:
    def __init__(self, store: StateStore, servers: List[Server], grader_for: Callable[[str], object],
                 payload_for: Callable[[Dict, Server], Dict], on_result: Callable[[Dict], None],
                 max_requeues: int = 3):
        self.store = store
        self.servers = servers
        self.grader_for = grader_for
        self.payload_for = payload_for
        self.on_result = on_result
        self.max_requeues = max_requeues
        self.outcome = RunOutcome()
        self._requeues: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._queue: Optional[TaskQueue] = None

    def run(self, task_ids: List[str]) -> RunOutcome:
        self._queue = TaskQueue(task_ids)
        workers = [threading.Thread(target=self._worker, args=(server,), daemon=True,
                                    name=f"{server.name}-{i}")
                   for server in self.servers for i in range(server.threads)]
        for worker in workers:
            worker.start()
        try:
            for worker in workers:
                while worker.is_alive():
                    worker.join(timeout=0.2)  # short joins keep Ctrl-C responsive
        except KeyboardInterrupt:
            self._queue.stop()
            raise
        self.outcome.unfinished = self._queue.remaining()
        self.outcome.all_servers_failed = self.outcome.unfinished > 0 and not any(s.alive for s in self.servers)
        return self.outcome

    def _worker(self, server: Server) -> None:
        while True:
            tid = self._queue.take(server)
            if tid is None:
                return
            try:
                requeue = self._attempt(server, tid)
            except Exception as err:  # a bug must not silently lose the task
                self._record_error(server, tid, {}, f"internal error: {type(err).__name__}: {err}")
                requeue = False
            if requeue:
                self._queue.give_back(tid)
            else:
                self._queue.finish()

    def _attempt(self, server: Server, tid: str) -> bool:
        """Runs one task on one server; True when it should go back in the queue."""
        task = self.store.task(tid)
        try:
            completion = server.client.complete(self.payload_for(task, server),
                                                should_stop=lambda: not server.alive)
        except RequestFailure as failure:
            return self._handle_request_failure(server, task, failure)
        self._note_success(server)
        fields = _completion_fields(completion)
        fields["attempts"] = task.get("attempts", 0) + completion.attempts
        try:
            verdict = self.grader_for(task["grader"]).grade(task, completion.content)
        except GradingError as err:
            self._record_error(server, tid, fields, f"grading failed: {err}")
            return False
        fields.update(status=DONE, correct=verdict.correct, extracted=verdict.extracted,
                      grade_detail=verdict.detail or None, error=None, server=server.name,
                      run=self.store.run_index, finished_at=now_iso())
        self.store.update_task(tid, fields)
        with self._lock:
            self.outcome.finished += 1
        self.on_result(dict(task, **fields))
        return False

    def _handle_request_failure(self, server: Server, task: Dict, failure: RequestFailure) -> bool:
        attempts = {"attempts": task.get("attempts", 0) + failure.attempts}
        if failure.kind == CLIENT:  # this request is wrong; another server would reject it too
            self._record_error(server, task["id"], attempts, str(failure))
            return False
        self._note_failure(server, failure)
        with self._lock:
            requeues = self._requeues[task["id"]] = self._requeues.get(task["id"], 0) + 1
        if requeues > self.max_requeues:
            self._record_error(server, task["id"], attempts, f"failed on {requeues} tries: {failure}")
            return False
        self.store.update_task(task["id"], attempts)
        return True

    def _record_error(self, server: Server, tid: str, fields: Dict, message: str) -> None:
        task = self.store.task(tid)
        fields = dict(fields, status=ERROR, error=message, correct=None, server=server.name,
                      run=self.store.run_index, finished_at=now_iso())
        self.store.update_task(tid, fields)
        with self._lock:
            self.outcome.errors += 1
            self.outcome.last_error = message
        self.on_result(dict(task, **fields))

    def _note_success(self, server: Server) -> None:
        with self._lock:
            server.consecutive_failures = 0

    def _note_failure(self, server: Server, failure: RequestFailure) -> None:
        with self._lock:
            server.consecutive_failures += 1
            self.outcome.last_error = f"{server.name}: {failure}"
            remove = server.alive and server.consecutive_failures >= server.max_failures
            if remove:
                server.alive = False
                self.outcome.removed_servers.append(server.name)
        if remove:
            print(f"llama-eval: warning: server {server.name} ({server.url}) taken out of rotation after "
                  f"{server.consecutive_failures} failed requests: {failure}", file=sys.stderr, flush=True)
            self._queue.wake_all()
