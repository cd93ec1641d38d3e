"""Turning command-line arguments into a run configuration and task list, or
reconciling them with the configuration stored by an earlier run (--resume)."""

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .questions.cases import Case
from .questions.datasets import (DEFAULT_GRADER, GPQA, KNOWN_DATASETS, SHIPPED, load_dataset_file, load_gpqa, load_shipped,
                       sample_cases)
from .errors import UsageError, warn
from .grading.graders import GRADER_NAMES, script_command
from .http_client import normalise_server_url
from .tasks import new_task

DEFAULTS = {"threads": 8, "timeout": 600.0, "retries": 3, "retry_backoff": 1.0, "max_server_failures": 3,
            "seed": 42, "n_repeats": 1}
SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed")


def split_list(text: Optional[str]) -> List[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


# The peer tool's names for datasets shipped here under another name, and
# what the substitute leaves out.
PEER_DATASETS = {
    "aime": ("aime2024", "its aime is AI-MO/aimo-validation-aime from Hugging Face (AIME 2022-2024, 90 "
                         "problems), which is not shipped; the 2024 problems are"),
}
NOT_SHIPPED = {
    "aime2026": "the peer tool reads it from Hugging Face, and it is not shipped here",
}


def _dataset_specs(args) -> List[Dict]:
    specs = []
    for name in split_list(args.dataset):
        if name in PEER_DATASETS:
            shipped, why = PEER_DATASETS[name]
            warn(f"--dataset {name}: {why}: running {shipped}")
            name = shipped
        if name in NOT_SHIPPED:
            raise UsageError(f"dataset {name!r}: {NOT_SHIPPED[name]}; give a JSONL copy with --dataset-file "
                             f"PATH --question-field problem --answer-field answer")
        if name == GPQA:
            if not args.gpqa_file:
                raise UsageError("gpqa is not shipped (its authors ask that it not be republished); "
                                 "pass --gpqa-file PATH to a copy you downloaded")
            continue
        if name not in SHIPPED:
            raise UsageError(f"unknown dataset {name!r}; known: {', '.join(KNOWN_DATASETS)} "
                             f"(or use --dataset-file)")
        specs.append({"name": name, "source": "shipped"})
    if args.gpqa_file:
        specs.append({"name": GPQA, "source": "gpqa", "path": str(Path(args.gpqa_file).resolve())})
    if args.dataset_file:
        if not args.question_field or not args.answer_field:
            raise UsageError("--dataset-file needs --question-field and --answer-field")
        name = args.dataset_name or Path(args.dataset_file).stem
        specs.append({"name": name, "source": "file", "path": str(Path(args.dataset_file).resolve()),
                      "question_field": args.question_field, "answer_field": args.answer_field,
                      "choices_field": args.choices_field})
    if not specs:
        raise UsageError("no dataset given: use --dataset NAME[,NAME...], --gpqa-file or --dataset-file")
    names = [s["name"] for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"dataset {duplicates[0]!r} given twice (use --dataset-name to rename a --dataset-file)")
    return specs


def load_cases(spec: Dict) -> List[Case]:
    if spec["source"] == "shipped":
        return load_shipped(spec["name"])
    if spec["source"] == "gpqa":
        return load_gpqa(Path(spec["path"]), spec["name"])
    return load_dataset_file(Path(spec["path"]), spec["name"], spec["question_field"], spec["answer_field"],
                             spec.get("choices_field"))


def _grader_for_dataset(spec: Dict, requested: Optional[str]) -> str:
    if requested:
        return requested
    if spec["source"] == "file":
        return "mc" if spec.get("choices_field") else "regex"
    return DEFAULT_GRADER[spec["name"]]


def _grader_config(args) -> Dict:
    if args.grader and args.grader not in GRADER_NAMES:
        raise UsageError(f"unknown grader {args.grader!r}; known: {', '.join(GRADER_NAMES)}")
    if args.grader == "cli" and not args.grader_script:
        raise UsageError("--grader cli needs --grader-script PATH")
    if args.grader_script:
        script_command(args.grader_script)  # fails now rather than after the state file exists
    judge_server, judge_model = args.judge_server, args.judge_model
    if args.grader == "llm" and not judge_server:
        # As the peer tool: the model under test judges, on the first server.
        servers = split_list(args.server)
        if not servers:
            raise UsageError("--grader llm needs --judge-server URL (or a --server to judge on)")
        judge_server, judge_model = servers[0], judge_model or args.model
    return {"type": args.grader,
            "script": str(Path(args.grader_script).resolve()) if args.grader_script else None,
            "judge_server": normalise_server_url(judge_server) if judge_server else None,
            "judge_model": judge_model, "judge_max_tokens": args.judge_max_tokens}


def server_list(args, stored: Optional[List[Dict]] = None) -> List[Dict]:
    """[{name, url, threads}] from --server/--server-name/--threads, or the stored list."""
    if args.server:
        urls = [normalise_server_url(u) for u in split_list(args.server)]
        names = split_list(args.server_name)
    elif stored:
        urls, names = [s["url"] for s in stored], split_list(args.server_name) or [s["name"] for s in stored]
    else:
        raise UsageError("no server given: use --server URL[,URL...]")
    if not urls:
        raise UsageError("--server is empty")
    if names and len(names) != len(urls):
        raise UsageError(f"--server-name has {len(names)} name(s) for {len(urls)} server(s)")
    threads = _thread_counts(args.threads, len(urls), stored if not args.server else None)
    names = names or [_default_name(url) for url in urls]
    if len(set(names)) != len(names):
        names = [f"{name}#{i}" for i, name in enumerate(names)]
    return [{"name": n, "url": u, "threads": t} for n, u, t in zip(names, urls, threads)]


def _default_name(url: str) -> str:
    return url.split("://", 1)[1]


def _thread_counts(text: Optional[str], n_servers: int, stored: Optional[List[Dict]]) -> List[int]:
    if text is None:
        return [s["threads"] for s in stored] if stored else [DEFAULTS["threads"]] * n_servers
    try:
        counts = [int(t) for t in split_list(text)]
    except ValueError:
        raise UsageError(f"--threads must be integers, got {text!r}") from None
    if not counts or any(c < 1 for c in counts):
        raise UsageError(f"--threads must be positive integers, got {text!r}")
    if len(counts) == 1:
        return counts * n_servers
    if len(counts) != n_servers:
        raise UsageError(f"--threads has {len(counts)} value(s) for {n_servers} server(s)")
    return counts


def _value(args, name: str):
    value = getattr(args, name)
    return DEFAULTS.get(name) if value is None else value


def request_settings(args, stored: Optional[Dict] = None) -> Dict:
    """Operational settings: may change between a run and its resume."""
    stored = stored or {}
    settings = {}
    for name in ("timeout", "retries", "retry_backoff", "max_server_failures"):
        value = getattr(args, name)
        settings[name] = value if value is not None else stored.get(name, DEFAULTS[name])
    settings["stream"] = args.stream if args.stream is not None else bool(stored.get("stream", False))
    return settings


def new_plan(args) -> Tuple[Dict, List[Dict]]:
    specs = _dataset_specs(args)
    grader = _grader_config(args)
    seed = _value(args, "seed")
    sample_seed = args.sample_seed if args.sample_seed is not None else max(seed, 0)
    n_repeats = _value(args, "n_repeats")
    tasks = []
    grader["per_dataset"] = {}
    for spec in specs:
        cases = sample_cases(load_cases(spec), args.n_cases, sample_seed)
        grader_name = grader["per_dataset"][spec["name"]] = _grader_for_dataset(spec, grader["type"])
        for case in cases:
            if grader_name == "mc" and not case.is_multiple_choice:
                raise UsageError(f"grader mc needs choices, but dataset {spec['name']} has none "
                                 f"(use --choices-field or another grader)")
            tasks.extend(new_task(case, r, grader_name, args.system_prompt) for r in range(n_repeats))
    sampling = {name: getattr(args, name) for name in SAMPLING_FLAGS}
    sampling["seed"] = seed
    config = {"datasets": specs, "n_cases": args.n_cases, "sample_seed": sample_seed, "n_repeats": n_repeats,
              "grader": grader, "sampling": sampling, "system_prompt": args.system_prompt, "model": args.model,
              "servers": server_list(args), "request": request_settings(args)}
    return config, tasks


def _requested_dataset_names(args) -> List[str]:
    names = [n for n in split_list(args.dataset) if n != GPQA]
    if args.gpqa_file:
        names.append(GPQA)
    if args.dataset_file:
        names.append(args.dataset_name or Path(args.dataset_file).stem)
    return names


def check_resume_conflicts(args, config: Dict) -> None:
    """Flags that define the experiment must match the stored run, or be left out."""
    conflicts = []

    def check(flag: str, given, stored):
        if given is not None and given != stored:
            conflicts.append(f"{flag} {given!r} (stored: {stored!r})")

    for name in SAMPLING_FLAGS:
        check("--" + name.replace("_", "-"), getattr(args, name), config["sampling"].get(name))
    check("--n-cases", args.n_cases, config["n_cases"])
    check("--sample-seed", args.sample_seed, config["sample_seed"])
    check("--n-repeats", args.n_repeats, config["n_repeats"])
    check("--system-prompt", args.system_prompt, config["system_prompt"])
    check("--model", args.model, config["model"])
    check("--grader", args.grader, config["grader"]["type"])
    check("--judge-model", args.judge_model, config["grader"]["judge_model"])
    if args.grader_script is not None:
        check("--grader-script", str(Path(args.grader_script).resolve()), config["grader"]["script"])
    if args.dataset or args.gpqa_file or args.dataset_file:
        check("--dataset", ",".join(_requested_dataset_names(args)),
              ",".join(d["name"] for d in config["datasets"]))
    if conflicts:
        raise UsageError("--resume uses the stored configuration, but these flags differ: " + "; ".join(conflicts)
                         + " (drop them, or start a new run with another --output)")


def apply_judge_overrides(args, config: Dict) -> None:
    """Where the judge runs may change between a run and its resume; which judge may not."""
    if args.judge_server:
        config["grader"]["judge_server"] = normalise_server_url(args.judge_server)
    if args.judge_max_tokens:
        config["grader"]["judge_max_tokens"] = args.judge_max_tokens
