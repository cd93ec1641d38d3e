#!/usr/bin/python3
"""Load benchmark for OpenAI-compatible servers (llama-tp-server, llama-server).

Bench mode: for every concurrency level, every server gets the same requests
(streaming chat completions by default) from N client threads; the report has
aggregate generated tok/s, requests/s, p50/p99 time to first token (first
non-empty content delta), p50/p99 total latency and failures, side by side.
With --repeat R the servers alternate which goes first at each level and
repetition, and medians are reported. With --no-stream the time to first
token is the whole response time.

    tools/load-bench.py --server http://127.0.0.1:8080 --name llama-tp \\
        --server http://127.0.0.1:8081 --name upstream \\
        --concurrency 1,8 --requests 32 --max-tokens 64 --prompt-tokens 128

Soak mode: --soak S runs --clients N (default 64) clients against the first
server for S seconds and reports failed requests and the growth of the server
process' resident memory (VmRSS from /proc/PID/status, --pid PID).

    tools/load-bench.py --server http://127.0.0.1:8080 --soak 120 --clients 64 --pid 1234

Only the standard library; loopback or any http:// URL. Every loop is bounded
in count and time. Exit status: 0, or 1 when a request failed (bench) or the
soak missed its goals (any failure, RSS growth >= --max-rss-growth percent).
"""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse

# A fixed English text to cut prompts from (public domain: the opening of
# Jerome K. Jerome's "Three Men in a Boat", lightly abridged).
TEXT = """
There were four of us, George, and William Samuel Harris, and myself, and
Montmorency. We were sitting in my room, smoking, and talking about how bad we
were, bad from a medical point of view I mean, of course. We were all feeling
seedy, and we were getting quite nervous about it. Harris said he felt such
extraordinary fits of giddiness come over him at times, that he hardly knew
what he was doing; and then George said that he had fits of giddiness too, and
hardly knew what he was doing. With me, it was my liver that was out of order.
I knew it was my liver that was out of order, because I had just been reading
a patent liver-pill circular, in which were detailed the various symptoms by
which a man could tell when his liver was out of order. I had them all. It is
a most extraordinary thing, but I never read a patent medicine advertisement
without being impelled to the conclusion that I am suffering from the
particular disease therein dealt with in its most virulent form. The diagnosis
seems in every case to correspond exactly with all the sensations that I have
ever felt. I remember going to the British Museum one day to read up the
treatment for some slight ailment of which I had a touch, hay fever, I fancy
it was. I got down the book, and read all I came to read; and then, in an
unthinking moment, I idly turned the leaves, and began to indolently study
diseases, generally. I forget which was the first distemper I plunged into,
some fearful, devastating scourge, I know, and, before I had glanced half down
the list of premonitory symptoms, it was borne in upon me that I had fairly
got it. I sat for a while, frozen with horror; and then, in the listlessness
of despair, I again turned over the pages. I came to typhoid fever, read the
symptoms, discovered that I had typhoid fever, must have had it for months
without knowing it, wondered what else I had got; turned up St. Vitus's Dance,
found, as I expected, that I had that too, began to get interested in my case,
and determined to sift it to the bottom, and so started alphabetically. I read
through the twenty-six letters, and the only malady I could conclude I had not
got was housemaid's knee. I felt rather hurt about this at first; it seemed
somehow to be a sort of slight. Why hadn't I got housemaid's knee? Why this
invidious reservation? After a while, however, less grasping feelings
prevailed. I reflected that I had every other known malady in the
pharmacology, and I grew less selfish, and determined to do without
housemaid's knee. I sat and pondered. I thought what an interesting case I
must be from a medical point of view, what an acquisition I should be to a
class! Students would have no need to walk the hospitals, if they had me. I
was a hospital in myself. All they need do would be to walk round me, and,
after that, take their diploma.
""".split()

WORDS_PER_TOKEN = 0.75  # English words per token, roughly, for Llama-style vocabularies


def make_prompt(n_tokens, index, salt):
    """About n_tokens tokens of TEXT, starting at a different word for every
    index and led by the index and the run's salt, so that no two requests
    share more than the chat template's prefix, within a run or across runs
    against the same server (no server can answer from a prompt cache, its
    slots' or one kept in host memory: every server does the same prefill)."""
    n_words = max(1, int(n_tokens * WORDS_PER_TOKEN) - 4)
    start = (index * 37) % len(TEXT)
    return f"Part {index} of {salt}. " + " ".join(TEXT[(start + i) % len(TEXT)] for i in range(n_words))


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Target:
    def __init__(self, url, name, api_key=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http":
            raise SystemExit(f"only http:// URLs are supported: {url}")
        self.url = url.rstrip("/")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.name = name
        self.api_key = api_key

    def connect(self, timeout):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, keep_alive):
        h = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if not keep_alive:
            h["Connection"] = "close"
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def get_json(self, path, timeout=5):
        c = self.connect(timeout)
        try:
            c.request("GET", self.prefix + path, headers=self.headers(False))
            r = c.getresponse()
            body = r.read()
            return r.status, (json.loads(body) if body else None)
        finally:
            c.close()


class Client:
    """One client thread's connection (kept alive between requests, or a new
    one per request) and the request it sends."""

    def __init__(self, target, args):
        self.t = target
        self.a = args
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def body(self, index):
        prompt = make_prompt(self.a.prompt_tokens, index, self.a.salt)
        b = {"max_tokens": self.a.max_tokens, "temperature": 0, "ignore_eos": True,
             "stream": self.a.stream}
        if self.a.model:
            b["model"] = self.a.model
        if self.a.endpoint == "chat":
            b["messages"] = [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        if self.a.stream:
            b["stream_options"] = {"include_usage": True}
        return b

    def one(self, index):
        """Send request `index`; returns a result dict (ok, ttft, latency,
        tokens, error)."""
        path = self.t.prefix + ("/v1/chat/completions" if self.a.endpoint == "chat" else "/v1/completions")
        data = json.dumps(self.body(index)).encode()
        res = {"ok": False, "ttft": None, "latency": None, "tokens": 0, "error": None}
        t0 = time.perf_counter()
        try:
            reused = self.conn is not None
            if self.conn is None:
                self.conn = self.t.connect(self.a.timeout)
            try:
                self.conn.request("POST", path, body=data, headers=self.t.headers(self.a.keep_alive))
                r = self.conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server had already closed (idle
                # timeout, request limit): nothing was answered, so send once
                # more on a new connection, as HTTP clients do. Counted.
                if not reused:
                    raise
                res["retried"] = True
                self.close()
                self.conn = self.t.connect(self.a.timeout)
                self.conn.request("POST", path, body=data, headers=self.t.headers(self.a.keep_alive))
                r = self.conn.getresponse()
            if r.status != 200:
                msg = r.read()[:300].decode("utf-8", "replace")
                res["error"] = f"HTTP {r.status}: {msg}"
                self.close()
                return res
            if self.a.stream:
                self._read_stream(r, t0, res)
            else:
                payload = json.loads(r.read())
                res["latency"] = time.perf_counter() - t0
                res["ttft"] = res["latency"]
                res["tokens"] = int(payload.get("usage", {}).get("completion_tokens", 0))
                ch = payload.get("choices") or [{}]
                res["finish_reason"] = ch[0].get("finish_reason")
                res["ok"] = True
            if not self.a.keep_alive or r.will_close:
                self.close()
        except Exception as e:  # socket errors, timeouts, bad JSON: all failures
            res["error"] = f"{type(e).__name__}: {e}"
            self.close()
        return res

    def _read_stream(self, r, t0, res):
        deltas = 0
        usage_tokens = None
        finish = None
        done = False
        first_chunk = None
        # Bounded: at most this many lines, and the socket timeout per read.
        max_lines = 64 * (self.a.max_tokens + 16)
        for _ in range(max_lines):
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line or line.startswith(b":"):
                continue
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            ev = json.loads(payload)
            if first_chunk is None:
                first_chunk = time.perf_counter()
            if "error" in ev:
                raise RuntimeError(f"error event: {json.dumps(ev)[:200]}")
            if ev.get("usage"):
                usage_tokens = ev["usage"].get("completion_tokens")
            for ch in ev.get("choices") or []:
                if self.a.endpoint == "chat":
                    text = (ch.get("delta") or {}).get("content")
                else:
                    text = ch.get("text")
                if text:
                    deltas += 1
                    if res["ttft"] is None:
                        res["ttft"] = time.perf_counter() - t0
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
        # Drain whatever follows [DONE] (nothing, normally) so that a kept-alive
        # connection is at a request boundary.
        if done and not r.isclosed():
            r.read()
        res["latency"] = time.perf_counter() - t0
        if not done:
            raise RuntimeError("stream ended without data: [DONE]")
        if finish is None:
            raise RuntimeError("stream had no finish_reason")
        if res["ttft"] is None:  # no visible text at all: time to first chunk
            res["ttft"] = (first_chunk or time.perf_counter()) - t0
        res["tokens"] = int(usage_tokens) if usage_tokens is not None else deltas
        res["finish_reason"] = finish
        res["ok"] = True


def run_level(target, args, concurrency, n_requests, duration, index_base=0):
    """concurrency threads share n_requests requests (or run until `duration`
    seconds have passed, when given). Returns the summary dict."""
    lock = threading.Lock()
    counter = [0]
    results = []
    hard_cap = n_requests if not duration else 1000000
    deadline = None

    def worker():
        c = Client(target, args)
        try:
            while True:
                with lock:
                    if counter[0] >= hard_cap:
                        return
                    if deadline is not None and time.perf_counter() >= deadline:
                        return
                    i = counter[0]
                    counter[0] += 1
                r = c.one(index_base + i)
                with lock:
                    results.append(r)
        finally:
            c.close()

    t0 = time.perf_counter()
    if duration:
        deadline = t0 + duration
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for th in threads:
        th.start()
    join_deadline = t0 + (duration or 0) + args.timeout * (1 + (hard_cap if not duration else 1)) + 5
    for th in threads:
        th.join(max(0.0, join_deadline - time.perf_counter()))
    wall = time.perf_counter() - t0
    return summarize(target.name, concurrency, wall, results)


def summarize(name, concurrency, wall, results):
    ok = [r for r in results if r["ok"]]
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    lat = [r["latency"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    errors = {}
    for r in results:
        if not r["ok"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1

    def ms(x):
        return None if x is None else round(x * 1000.0, 1)

    return {
        "server": name, "concurrency": concurrency, "requests": len(results), "ok": len(ok),
        "failures": len(results) - len(ok), "reconnects": sum(1 for r in results if r.get("retried")),
        "wall_s": round(wall, 3),
        "completion_tokens": tokens,
        "tok_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "req_per_s": round(len(ok) / wall, 3) if wall > 0 else None,
        "ttft_p50_ms": ms(percentile(ttft, 50)), "ttft_p99_ms": ms(percentile(ttft, 99)),
        "latency_p50_ms": ms(percentile(lat, 50)), "latency_p99_ms": ms(percentile(lat, 99)),
        "ttft_max_ms": ms(max(ttft) if ttft else None), "latency_max_ms": ms(max(lat) if lat else None),
        "errors": [{"error": e, "count": n} for e, n in sorted(errors.items(), key=lambda kv: -kv[1])][:5],
    }


def wait_healthy(target, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            st, _ = target.get_json("/health", timeout=2)
            if st == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


def print_table(rows, out=sys.stdout):
    cols = [("server", "server"), ("concurrency", "conc"), ("rep", "rep"), ("ok", "ok"),
            ("failures", "fail"), ("tok_per_s", "tok/s"), ("req_per_s", "req/s"),
            ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"),
            ("latency_p50_ms", "lat p50 ms"), ("latency_p99_ms", "lat p99 ms")]
    cells = [[fmt(r.get(k)) for k, _ in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, (_, h) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (_, h), w in zip(cols, widths)), file=out)
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)), file=out)


def median_rows(runs, names, levels):
    out = []
    for c in levels:
        for n in names:
            rs = [r for r in runs if r["server"] == n and r["concurrency"] == c]
            if not rs:
                continue
            m = {"server": n, "concurrency": c, "rep": "med" if len(rs) > 1 else rs[0]["rep"],
                 "ok": sum(r["ok"] for r in rs), "failures": sum(r["failures"] for r in rs)}
            for k in ("tok_per_s", "req_per_s", "ttft_p50_ms", "ttft_p99_ms", "latency_p50_ms", "latency_p99_ms"):
                vals = [r[k] for r in rs if r[k] is not None]
                m[k] = round(statistics.median(vals), 2) if vals else None
            out.append(m)
    return out


def bench(args, targets):
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    for t in targets:
        if not wait_healthy(t, args.health_timeout):
            raise SystemExit(f"{t.name}: {t.url}/health is not ok")
    # Warm-up: a few requests per server, not counted.
    for t in targets:
        if args.warmup:
            run_level(t, args, min(args.warmup, max(levels)), args.warmup, None, index_base=10**6)
    runs = []
    for rep in range(args.repeat):
        for li, c in enumerate(levels):
            order = list(targets)
            if (rep + li) % 2 == 1:
                order.reverse()
            for t in order:
                n = args.requests if args.requests else max(8, 4 * c)
                s = run_level(t, args, c, n, args.duration, index_base=rep * 100000 + li * 10000)
                s["rep"] = rep + 1
                s["first"] = order[0].name
                runs.append(s)
                if not args.json:
                    print(f"# rep {rep + 1} conc {c} {t.name}: {s['tok_per_s']} tok/s, "
                          f"ttft p99 {s['ttft_p99_ms']} ms, failures {s['failures']}", file=sys.stderr)
    names = [t.name for t in targets]
    summary = median_rows(runs, names, levels)
    ratios = []
    if len(targets) >= 2:
        a, b = names[0], names[1]
        for c in levels:
            ra = next((m for m in summary if m["server"] == a and m["concurrency"] == c), None)
            rb = next((m for m in summary if m["server"] == b and m["concurrency"] == c), None)
            if ra and rb and rb["tok_per_s"] and rb["ttft_p99_ms"]:
                ratios.append({"concurrency": c, "servers": [a, b],
                               "tok_per_s_ratio": round(ra["tok_per_s"] / rb["tok_per_s"], 3),
                               "ttft_p99_ratio": round(ra["ttft_p99_ms"] / rb["ttft_p99_ms"], 3),
                               "latency_p99_ratio": round(ra["latency_p99_ms"] / rb["latency_p99_ms"], 3)})
    result = {
        "mode": "bench",
        "config": {"servers": [{"name": t.name, "url": t.url} for t in targets], "concurrency": levels,
                   "requests": args.requests or "max(8, 4*concurrency)", "duration_s": args.duration,
                   "max_tokens": args.max_tokens, "prompt_tokens_approx": args.prompt_tokens,
                   "stream": args.stream, "endpoint": args.endpoint, "keep_alive": args.keep_alive,
                   "repeat": args.repeat, "warmup": args.warmup, "salt": args.salt},
        "runs": runs, "summary": summary, "ratios": ratios,
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(runs if args.repeat > 1 else summary)
        if args.repeat > 1:
            print("\nmedians:")
            print_table(summary)
        for r in ratios:
            print(f"conc {r['concurrency']}: {r['servers'][0]} / {r['servers'][1]}: tok/s x{r['tok_per_s_ratio']}, "
                  f"TTFT p99 x{r['ttft_p99_ratio']}, latency p99 x{r['latency_p99_ratio']}")
        for s in runs:
            for e in s["errors"]:
                print(f"{s['server']} conc {s['concurrency']}: {e['count']} x {e['error']}")
    return 0 if all(r["failures"] == 0 for r in runs) else 1


def vm_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def soak(args, target):
    if not wait_healthy(target, args.health_timeout):
        raise SystemExit(f"{target.name}: {target.url}/health is not ok")
    # Warm-up: one request per client, all at once, so that every slot, buffer
    # and HTTP thread has been used before the baseline RSS is taken.
    warm = run_level(target, args, args.clients, args.clients, None, index_base=10**6)
    rss0 = vm_rss_kib(args.pid) if args.pid else None
    samples = []
    stop = threading.Event()

    def sampler():
        t_start = time.time()
        for _ in range(int(args.soak) + 120):  # bounded: one sample a second
            if stop.wait(1.0):
                break
            samples.append((round(time.time() - t_start, 1), vm_rss_kib(args.pid)))

    st = None
    if args.pid:
        st = threading.Thread(target=sampler, daemon=True)
        st.start()
    s = run_level(target, args, args.clients, 0, args.soak, index_base=0)
    # Let the server settle, then read the final RSS and the slot state.
    idle = None
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            code, props = target.get_json("/props", timeout=2)
            if code == 200 and isinstance(props, dict) and "busy_slots" in props:
                idle = props.get("busy_slots") == 0 and props.get("queued_requests", 0) == 0
                if idle:
                    break
            else:
                break
        except (OSError, ValueError):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    rss1 = vm_rss_kib(args.pid) if args.pid else None
    stop.set()
    if st:
        st.join(3)
    try:
        health = target.get_json("/health", timeout=5)[0]
    except OSError as e:
        health = f"{type(e).__name__}: {e}"
    rss_vals = [v for _, v in samples if v is not None]
    growth = None if not (rss0 and rss1) else round(100.0 * (rss1 - rss0) / rss0, 2)
    # Growth from a quarter into the soak to the end: allocator and thread
    # warm-up is over by then, so what remains is what a leak would add.
    late = [v for t, v in samples if v is not None and t >= args.soak / 4]
    rss_q = late[0] if late else None
    late_growth = None if not (rss_q and rss1) else round(100.0 * (rss1 - rss_q) / rss_q, 2)
    result = {
        "mode": "soak", "server": target.name, "url": target.url, "clients": args.clients,
        "duration_s": args.soak, "max_tokens": args.max_tokens, "prompt_tokens_approx": args.prompt_tokens,
        "stream": args.stream, "endpoint": args.endpoint, "keep_alive": args.keep_alive,
        "warmup": {"requests": warm["requests"], "failures": warm["failures"]},
        "requests": s["requests"], "ok": s["ok"], "failures": s["failures"], "errors": s["errors"],
        "reconnects": s["reconnects"],
        "tok_per_s": s["tok_per_s"], "req_per_s": s["req_per_s"],
        "ttft_p50_ms": s["ttft_p50_ms"], "ttft_p99_ms": s["ttft_p99_ms"],
        "latency_p50_ms": s["latency_p50_ms"], "latency_p99_ms": s["latency_p99_ms"],
        "ttft_max_ms": s["ttft_max_ms"], "latency_max_ms": s["latency_max_ms"],
        "wall_s": s["wall_s"], "pid": args.pid,
        "rss_start_kib": rss0, "rss_end_kib": rss1, "rss_growth_pct": growth,
        "rss_min_kib": min(rss_vals) if rss_vals else None, "rss_max_kib": max(rss_vals) if rss_vals else None,
        "rss_quarter_kib": rss_q, "rss_growth_after_quarter_pct": late_growth,
        "idle_after": idle, "health_after": health,
    }
    passed = (s["failures"] == 0 and warm["failures"] == 0 and health == 200
              and (growth is None or growth < args.max_rss_growth))
    result["passed"] = passed
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"soak {target.name}: {args.clients} clients, {s['wall_s']:.1f} s: {s['requests']} requests, "
              f"{s['failures']} failed (warm-up {warm['failures']} of {warm['requests']})"
              + (f", {s['reconnects']} resent on a new connection" if args.keep_alive else ""))
        print(f"  {s['tok_per_s']} tok/s, {s['req_per_s']} req/s, TTFT p50/p99 {s['ttft_p50_ms']}/{s['ttft_p99_ms']} ms, "
              f"latency p50/p99/max {s['latency_p50_ms']}/{s['latency_p99_ms']}/{s['latency_max_ms']} ms")
        if args.pid:
            print(f"  VmRSS {rss0} -> {rss1} KiB ({growth}%), min/max during {result['rss_min_kib']}/"
                  f"{result['rss_max_kib']} KiB; from a quarter in: {rss_q} -> {rss1} KiB ({late_growth}%)")
        print(f"  idle after: {idle}, /health after: {health}; {'PASS' if passed else 'FAIL'}")
        for e in s["errors"]:
            print(f"  {e['count']} x {e['error']}")
    return 0 if passed else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", action="append", required=True, help="base URL (repeatable)")
    p.add_argument("--name", action="append", default=[], help="name of the matching --server")
    p.add_argument("--api-key", default=None)
    p.add_argument("--model", default=None, help="`model` field of the requests (default: none)")
    p.add_argument("--concurrency", default="1,8", help="comma-separated levels (default 1,8)")
    p.add_argument("--requests", type=int, default=0,
                   help="requests per server and level (default max(8, 4*concurrency))")
    p.add_argument("--duration", type=float, default=0, help="seconds per server and level instead of --requests")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=128, help="approximate prompt length in tokens")
    p.add_argument("--stream", dest="stream", action="store_true", default=True)
    p.add_argument("--no-stream", dest="stream", action="store_false")
    p.add_argument("--endpoint", choices=["chat", "completion"], default="chat")
    p.add_argument("--keep-alive", action="store_true",
                   help="keep one connection per client between requests (default: a new one each)")
    p.add_argument("--repeat", type=int, default=1, help="repetitions; the order of the servers alternates")
    p.add_argument("--warmup", type=int, default=2, help="uncounted requests per server first")
    p.add_argument("--timeout", type=float, default=120.0, help="socket timeout per request (s)")
    p.add_argument("--health-timeout", type=float, default=60.0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--salt", type=int, default=None,
                   help="number written into every prompt (default: random per run, so that a second run "
                        "against the same servers cannot hit their prompt caches)")
    p.add_argument("--soak", type=float, default=0, help="soak mode: seconds (at most 3600)")
    p.add_argument("--clients", type=int, default=64, help="soak clients (default 64)")
    p.add_argument("--pid", type=int, default=0, help="server process for VmRSS (soak)")
    p.add_argument("--max-rss-growth", type=float, default=5.0, help="soak goal, percent (default 5)")
    args = p.parse_args(argv)
    if args.salt is None:
        args.salt = random.randrange(1, 10**6)
    if args.soak > 3600 or args.duration > 3600:
        p.error("--soak and --duration are limited to 3600 s")
    if args.clients < 1 or args.clients > 1024:
        p.error("--clients must be 1..1024")
    names = list(args.name) + [None] * (len(args.server) - len(args.name))
    targets = [Target(u, n or f"server{i + 1}", args.api_key) for i, (u, n) in enumerate(zip(args.server, names))]
    if args.soak:
        return soak(args, targets[0])
    return bench(args, targets)


if __name__ == "__main__":
    sys.exit(main())
