"""Executing a planned run: servers, graders, progress, the log, and the
reports written at the end."""

import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

try:
    from tqdm import tqdm
except ImportError:  # a Python without tqdm: PlainProgress below
    tqdm = None

from .case_log import CaseLog
from .errors import RunError, UsageError, warn
from .grading.graders import ChoiceGrader, JudgeGrader, RegexGrader, ScriptGrader
from .http_client import ChatClient
from .report.report_text import summary_table
from .scheduler import Runner, Server
from .state import StateStore
from .tasks import DONE, ERROR, request_payload


def make_graders(config: Dict, settings: Dict, judge_api_key: Optional[str], needed: set) -> Dict:
    graders = {"regex": RegexGrader(), "mc": ChoiceGrader()}
    grader = config["grader"]
    if "cli" in needed:
        graders["cli"] = ScriptGrader(grader["script"])
    if "llm" in needed:
        client = ChatClient(grader["judge_server"], judge_api_key, settings["timeout"], settings["retries"],
                            settings["retry_backoff"])
        graders["llm"] = JudgeGrader(client, grader.get("judge_model"), grader.get("judge_max_tokens"))
    return graders


def make_servers(specs: List[Dict], settings: Dict, api_key: Optional[str]) -> List[Server]:
    return [Server(name=s["name"], url=s["url"], threads=s["threads"],
                   client=ChatClient(s["url"], api_key, settings["timeout"], settings["retries"],
                                     settings["retry_backoff"], settings["stream"]),
                   max_failures=settings["max_server_failures"])
            for s in specs]


def probe_models(servers: List[Server]) -> None:
    """Asks each server for its model id, used when --model was not given."""
    for server in servers:
        try:
            models = server.client.list_models()
            server.model = models[0] if models else None
        except Exception as err:  # any failure only means "no model id"; the run itself will tell
            warn(f"server {server.name} did not list its models ({type(err).__name__}); sending no model id")


class PlainProgress:
    """The part of tqdm's interface Progress uses, as a plain line on stderr at
    most once a second and once at the end."""

    def __init__(self, total: int, enabled: bool, file=sys.stderr, clock=time.monotonic, interval: float = 1.0):
        self._total, self._enabled, self._file, self._clock, self._interval = total, enabled, file, clock, interval
        self._n = 0
        self._fields: Dict = {}
        self._last = None
        self._printed_n = -1

    def set_postfix(self, refresh: bool = False, **fields) -> None:
        self._fields = fields

    def update(self, n: int = 1) -> None:
        self._n += n
        now = self._clock()
        if self._last is None or now - self._last >= self._interval or self._n == self._total:
            self._print()
            self._last = now

    def close(self) -> None:
        if self._printed_n != self._n:
            self._print()

    @staticmethod
    def write(line: str, file=sys.stderr) -> None:
        print(line, file=file, flush=True)

    def _print(self) -> None:
        if not self._enabled:
            return
        fields = "".join(f", {k} {v}" for k, v in self._fields.items())
        print(f"llama-eval: {self._n}/{self._total} tasks{fields}", file=self._file, flush=True)
        self._printed_n = self._n


def progress_bar(total: int, enabled: bool, bar_class=None):
    """tqdm's bar where tqdm is installed, else a plain progress line."""
    bar_class = bar_class if bar_class is not None else tqdm
    if bar_class is None:
        return PlainProgress(total, enabled)
    return bar_class(total=total, file=sys.stderr, disable=not enabled, unit="task", dynamic_ncols=True)


def task_line(task: Dict) -> str:
    """--verbose: one finished task, as the peer tool prints each case."""
    where = f"{task['id']} on {task.get('server') or '-'}"
    if task.get("status") == ERROR:
        return f"{where}: error: {task.get('error')}"
    verdict = "correct" if task.get("correct") else "wrong"
    return f"{where}: answer {task.get('extracted')!r}, reference {task.get('reference')!r}: {verdict}"


class Progress:
    def __init__(self, total: int, enabled: bool, log: Optional[CaseLog], verbose: bool = False):
        self._bar = progress_bar(total, enabled)
        self._log = log
        self._verbose = verbose
        self._lock = threading.Lock()
        self._done = self._correct = self._errors = 0

    def on_result(self, task: Dict) -> None:
        if self._log:
            self._log.write(task)
        with self._lock:
            if task.get("status") == DONE:
                self._done += 1
                self._correct += bool(task.get("correct"))
            elif task.get("status") == ERROR:
                self._errors += 1
            accuracy = f"{100 * self._correct / self._done:.1f}%" if self._done else "-"
            self._bar.set_postfix(acc=accuracy, errors=self._errors, refresh=False)
            self._bar.update(1)
            if self._verbose:
                self._bar.write(task_line(task), file=sys.stderr)  # above tqdm's bar, not through it

    def close(self) -> None:
        self._bar.close()


def default_log_path(output: Path) -> Path:
    return output.with_name(output.stem + ".cases.jsonl")


def write_reports(store: StateStore, html_path: Optional[str]) -> None:
    state = store.snapshot()
    print(summary_table(state))
    if html_path:
        from .report.report_html import render_html  # imports matplotlib: only when asked for
        try:
            Path(html_path).write_text(render_html(state), encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write HTML report {html_path}: {err.strerror}") from None
        print(f"HTML report: {html_path}")


def execute(store: StateStore, server_specs: List[Dict], settings: Dict, args, resumed: bool) -> int:
    config = store.config
    pending = store.unfinished_ids()
    log_path = Path(args.log) if args.log else default_log_path(store.path)
    if not pending:
        print(f"nothing to run: all {len(store.state['tasks'])} tasks in {store.path} are done", file=sys.stderr)
        store.save(force=True)
        write_reports(store, args.html)
        return 0
    needed = {store.state["tasks"][tid]["grader"] for tid in pending}
    graders = make_graders(config, settings, args.judge_api_key, needed)
    servers = make_servers(server_specs, settings, args.api_key)
    if not config.get("model"):
        probe_models(servers)
    store.begin_run([{"name": s.name, "url": s.url, "threads": s.threads, "model": s.model} for s in servers])
    if resumed:
        print(f"resuming {store.path}: {len(store.state['tasks']) - len(pending)} task(s) done, "
              f"{len(pending)} to run", file=sys.stderr, flush=True)
    log = CaseLog(log_path, append=resumed)
    progress = Progress(len(pending), not args.no_progress, log, args.verbose)
    runner = Runner(store, servers, graders.__getitem__,
                    lambda task, server: request_payload(task, config, config.get("model") or server.model),
                    progress.on_result)
    try:
        outcome = runner.run(pending)
    except KeyboardInterrupt:
        progress.close()
        store.end_run("interrupted", runner.outcome.removed_servers)
        log.close()
        raise
    progress.close()
    store.end_run("all servers failed" if outcome.all_servers_failed else "finished", outcome.removed_servers)
    log.close()
    write_reports(store, args.html)
    print(f"state: {store.path}\nlog: {log_path}", file=sys.stderr)
    summary = store.state["summary"]
    if outcome.all_servers_failed:
        raise RunError(f"all servers failed (last error: {outcome.last_error}); {summary['n']} of "
                       f"{len(store.state['tasks'])} tasks done, the rest is saved in {store.path}: "
                       f"fix the servers and rerun with --resume")
    if summary["errors"] or summary["pending"]:
        warn(f"{summary['errors']} task(s) failed and {summary['pending']} did not run; "
             f"rerun with --resume to retry them")
        return 1
    return 0
