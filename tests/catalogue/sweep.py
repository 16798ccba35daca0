"""The catalogue sweep: every model type of transformers' auto mappings for six tasks through jaxport.

    python -m tests.catalogue.sweep [--tasks causal-lm,...] [--models llama,gpt2] [--stages build]
        [--jobs 2] [--timeout 240] [--results tests/catalogue/results.jsonl] [--rerun-failed] [--rerun] [--stale]

Each (task, model type) runs in its own subprocess (`--worker`), so a crash or a hang costs that
model only: the stage running at the time limit is recorded as "timeout", one that dies as
"crash". One JSON line per model is appended to the results file as it finishes (the file is compacted to
the latest line per model, in catalogue order, at the start and end of a run), so the sweep can
be stopped at any time and resumes where it stopped: models whose latest row already has every
requested stage are skipped (`--rerun-failed` reruns those with a stage not ok, `--rerun` all,
`--stale` those recorded at another commit than the code's, the last to change the package or the
harness (`code_commit`): `make catalogue-head` brings every row to it, across as many runs as it takes).
`python -m tests.catalogue.report` turns the results into docs/transformers-catalogue.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from tests.catalogue import harness

RESULTS = os.path.join(os.path.dirname(__file__), "results.jsonl")
TIMEOUT = 240
_RUNNING: set[subprocess.Popen] = set()  # killed when the sweep is interrupted


def read_results(path: str) -> dict[tuple[str, str], dict]:
    """The latest row per (task, model) of a results file."""
    latest: dict[tuple[str, str], dict] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    latest[(row["task"], row["model"])] = row
    return latest


def compact(path: str) -> None:
    """Rewrite the results file with the latest row per model, in catalogue order (atomically, so
    an interruption leaves the old file)."""
    latest = read_results(path)
    if not latest:
        return
    order = {task: i for i, task in enumerate(harness.TASKS)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for key in sorted(latest, key=lambda k: (order.get(k[0], len(order)), k[1])):
            f.write(json.dumps(latest[key]) + "\n")
    os.replace(tmp, path)


def _done(row: dict | None, stages: tuple[str, ...], rerun_failed: bool) -> bool:
    if row is None:
        return False
    results = row.get("stages", {})
    for stage in stages:
        status = results.get(stage, {}).get("status", "not run")
        if status == "not run" or (rerun_failed and status not in ("ok", "skipped")):
            return False
    return True


def versions() -> dict:
    import jax
    import torch
    import transformers

    out = {"transformers": transformers.__version__, "torch": torch.__version__, "jax": jax.__version__}
    commit = code_commit()
    if commit:
        out["jaxport"] = commit
    return out


#: What a row's result depends on besides the libraries: the package and the harness (not the
#: results file, so committing rows part-way does not make the rest of a sweep another commit's).
CODE = ("src", "pyproject.toml", "tests/catalogue/harness.py", "tests/catalogue/shrink.py",
        "tests/catalogue/sweep.py")


def code_commit() -> str | None:
    """The last commit that changed `CODE`, "+dirty" when it has uncommitted changes: the commit a
    row's results belong to. None outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=root).stdout.strip()

    try:
        commit = git("log", "-1", "--format=%h", "--abbrev=7", "--", *CODE)
        dirty = git("status", "--porcelain", "--", *CODE)
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "") if commit else None


# -- the worker: one model in this process --------------------------------------------------------


def worker(task: str, model_type: str, stages: tuple[str, ...]) -> None:
    """Runs `harness.check`, printing each stage's start and end as JSON lines, then the row."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.set_num_threads(1)

    def emit(stage: str, result: dict) -> None:
        print(json.dumps({"stage": stage, "result": result}), flush=True)

    row = harness.check(task, model_type, stages, emit=emit)
    print(json.dumps({"row": row}), flush=True)


def _run_worker(task: str, model_type: str, stages: tuple[str, ...], timeout: float) -> dict:
    """Run one worker; returns {"events", "row", "rc", "stderr", "timed_out"}."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, "-m", "tests.catalogue.sweep", "--worker", task, model_type,
           "--stages", ",".join(stages)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=root, env=env, start_new_session=True)
        _RUNNING.add(proc)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        finally:
            _RUNNING.discard(proc)
        out.seek(0)
        err.seek(0)
        events, row, facts = [], None, {}
        for line in out:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a model printing to stdout
            if "row" in message:
                row = message["row"]
            elif message.get("stage") == "facts":
                facts.update(message["result"])
            elif "stage" in message:
                events.append(message)
        stderr = [line.strip() for line in err.read().splitlines() if line.strip()]
    return {"events": events, "row": row, "facts": facts, "rc": rc,
            "stderr": stderr[-1][:300] if stderr else "", "timed_out": timed_out}


def _stage_results(run: dict, stages: tuple[str, ...], timeout: float) -> dict:
    """Per-stage results of a worker that may have been killed or died mid-stage."""
    results: dict[str, dict] = {}
    running = None
    for event in run["events"]:
        if event["result"].get("status") == "running":
            running = event["stage"]
        else:
            results[event["stage"]] = event["result"]
            if running == event["stage"]:
                running = None
    if running is not None:
        if run["timed_out"]:
            results[running] = {"status": "timeout", "error": f"still running after {timeout:g} s"}
        else:
            results[running] = {"status": "crash",
                                "error": f"the process died (exit {run['rc']}): {run['stderr']}"[:300]}
    for stage in stages:
        results.setdefault(stage, {"status": "not run"})
    return results


def run_model(task: str, model_type: str, stages: tuple[str, ...], timeout: float) -> dict:
    start = time.time()
    run = _run_worker(task, model_type, stages, timeout)
    if run["row"] is not None:
        row = run["row"]
    else:
        row = {"task": task, "model": model_type, **run["facts"],
               "stages": _stage_results(run, stages, timeout)}
        if not run["events"]:
            row["stages"]["build"] = {"status": "timeout" if run["timed_out"] else "crash",
                                      "error": run["stderr"] or f"exit {run['rc']}"}
        # a stage that hung or crashed must not hide the eager frontend's result: run it alone
        if "eager" in stages and row["stages"]["eager"]["status"] == "not run" and (
                row["stages"].get("build", {}).get("status") == "ok"):
            again = _run_worker(task, model_type, ("build", "eager"), timeout)
            retry = again["row"]["stages"] if again["row"] else _stage_results(again, ("build", "eager"), timeout)
            row["stages"]["eager"] = retry["eager"]
            if again["row"]:
                row.update({k: v for k, v in again["row"].items() if k not in ("stages",)})
    row["seconds"] = round(time.time() - start, 1)
    row["date"] = datetime.date.today().isoformat()
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("TASK", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--tasks", default=",".join(harness.TASKS), help="comma-separated tasks")
    parser.add_argument("--models", help="comma-separated model types (default: every one of the tasks)")
    parser.add_argument("--stages", default=",".join(harness.STAGES),
                        help="comma-separated stages (build always runs); e.g. --stages build")
    parser.add_argument("--jobs", type=int, default=2, help="models run at once")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per model")
    parser.add_argument("--results", default=RESULTS, help="the JSON-lines file to append to")
    parser.add_argument("--rerun-failed", action="store_true", help="rerun models with a stage not ok")
    parser.add_argument("--rerun", action="store_true", help="rerun every selected model")
    parser.add_argument("--stale", action="store_true",
                        help="rerun models whose latest row is from another commit than the code's (resumable)")
    opts = parser.parse_args(argv)
    stages = tuple(s for s in harness.STAGES if s in opts.stages.split(",") or s == "build")
    unknown = set(opts.stages.split(",")) - set(harness.STAGES)
    if unknown:
        parser.error(f"unknown stages {sorted(unknown)}; the stages are {', '.join(harness.STAGES)}")
    if opts.worker:
        worker(*opts.worker, stages)
        return
    tasks = opts.tasks.split(",")
    unknown = set(tasks) - set(harness.TASKS)
    if unknown:
        parser.error(f"unknown tasks {sorted(unknown)}; the tasks are {', '.join(harness.TASKS)}")
    wanted = set(opts.models.split(",")) if opts.models else None
    compact(opts.results)
    done = read_results(opts.results)
    info = versions()
    if opts.stale:
        done = {k: r for k, r in done.items() if r.get("versions", {}).get("jaxport") == info.get("jaxport")}
    todo = [(task, m) for task in tasks for m in harness.model_types(task)
            if (wanted is None or m in wanted)
            and (opts.rerun or not _done(done.get((task, m)), stages, opts.rerun_failed))]
    print(f"{len(todo)} models to run ({', '.join(stages)}); results in {opts.results}", flush=True)
    if not todo:
        return
    lock = threading.Lock()
    os.makedirs(os.path.dirname(os.path.abspath(opts.results)), exist_ok=True)

    def one(item):
        task, model_type = item
        row = run_model(task, model_type, stages, opts.timeout)
        row["versions"] = info
        with lock, open(opts.results, "a") as f:
            f.write(json.dumps(row) + "\n")
        summary = " ".join(f"{s}={row['stages'].get(s, {}).get('status', '-')}" for s in stages)
        print(f"{task:24s} {model_type:28s} {summary} ({row['seconds']:.0f} s)", flush=True)

    pool = concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs))
    try:
        for future in [pool.submit(one, item) for item in todo]:
            future.result()
    except KeyboardInterrupt:  # stop now: what finished is recorded, the rest runs next time
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in list(_RUNNING):
            os.killpg(proc.pid, signal.SIGKILL)
        print("interrupted; rerun to resume", flush=True)
        sys.exit(130)
    pool.shutdown()
    compact(opts.results)


if __name__ == "__main__":
    main()
