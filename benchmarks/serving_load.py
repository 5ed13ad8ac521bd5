"""`keras-transformer serve` under load: concurrent clients, one sentence each, batched and one at a time.

    keras-transformer train --output runs/es-en      # the README's first command
    python -m benchmarks.serving_load --model runs/es-en --out benchmarks/results/cpu-serving-load

For 1, 8 and 64 concurrent clients (loopback only), each request one
sentence of the test split, in order: sentences per second and p50 / p99
latency, for the server as it starts by default (batching across
requests) and for the same server with `--max-batch-sentences 1` (one
request at a time, as OpenNMT-py's `onmt_server` runs them). The ceiling
is the offline figure: the same run's compiled engine translating the
whole split in this process, sorted batches of 8 as `evaluate` runs them,
with `evaluate`'s program and with the server's (an n-best program: every
request may ask for scores). And one short sentence alone: the server's
answer time against the decoding program's own time for it. Every level
is bounded in requests (`--requests`) and seconds (`--seconds`); every
server is stopped with SIGTERM and reaped. Writes `results.json` and
`results.md` in `--out`.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

from keras_transformer_runtime.serving.server_process import ServerProcess

SHORT_SENTENCE = "Y dijo Dios: Sea la luz."
START_TIMEOUT = 900


def _percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def offline(run, texts, repeats=3):
    """Sentences per second of the compiled engine over `texts` in this process (evaluate's way), and the
    decoding program's own time for `SHORT_SENTENCE` alone (the server's program)."""
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache

    cache = ProgramCache()
    rates, translations = {}, None
    for label, n_best in (("evaluate's program", None), ("the server's program (n-best of 4)", 4)):
        translator = load_compiled_translator(str(run), cache, beam_width=4, n_best=n_best)
        if translator is None:  # a child `translate` writes it into the cache, as the server's start does
            flags = ("--n-best", "4", "--format", "jsonl") if n_best else ()
            subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(run),
                            "--engine", "compiled", *flags, ""], check=True, capture_output=True, timeout=START_TIMEOUT)
            translator = load_compiled_translator(str(run), cache, beam_width=4, n_best=n_best)
        translate = (lambda: translator(texts)) if n_best is None else (
            lambda: [t.text for t in translator.n_best(texts, 4)])
        first = translate()  # compiles (or loads XLA's code) every shape
        translations = translations or first
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            translate()
            seconds.append(time.perf_counter() - start)
        rates[label] = len(texts) / statistics.median(seconds)
        if n_best:
            alone = []
            for _ in range(21):
                start = time.perf_counter()
                translator.n_best([SHORT_SENTENCE], 4)
                alone.append(time.perf_counter() - start)
            program_seconds = statistics.median(alone[1:])
    return rates, program_seconds, translations


def _post(connection, text):
    """One `/v1/translate` request on a kept-alive `http.client` connection: `(status, answer)`."""
    connection.request("POST", "/v1/translate", json.dumps({"text": text}).encode(),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def _load(url, texts, clients, seconds_limit):
    """`clients` concurrent callers take the next sentence until `texts` or `seconds_limit` run out.

    Each caller is a thread holding one kept-alive connection of the standard
    library's `http.client`: a load generator of little CPU (about 0.2 ms a
    request here; httpx's asyncio client took 8 ms, a third of this 2-core
    machine at 64 clients, which the server then lacked).
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    latencies, answers, failures = [], {}, []
    indices, lock = iter(range(len(texts))), threading.Lock()
    deadline = time.perf_counter() + seconds_limit

    def caller():
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            while time.perf_counter() < deadline:
                with lock:
                    index = next(indices, None)
                if index is None:
                    return
                start = time.perf_counter()
                status, answer = _post(connection, texts[index])
                latencies.append(time.perf_counter() - start)
                if status == 200:
                    answers[index] = answer["translations"][0]["hypotheses"][0]["text"]
                else:
                    failures.append(status)
        finally:
            connection.close()

    cpu = time.process_time()
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        for caller_done in [pool.submit(caller) for _ in range(clients)]:
            caller_done.result()
    wall = time.perf_counter() - start
    return {"clients": clients, "requests": len(latencies), "failures": len(failures),
            "sentences_per_second": len(answers) / wall, "p50_ms": 1000 * _percentile(latencies, 0.5),
            "p99_ms": 1000 * _percentile(latencies, 0.99), "wall_seconds": wall,
            "client_cpu_seconds": time.process_time() - cpu}, answers


def _alone(url, repeats=21):
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    seconds = []
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            status, _ = _post(connection, SHORT_SENTENCE)
            if status != 200:
                raise RuntimeError(f"the server answered {status}")
            seconds.append(time.perf_counter() - start)
    finally:
        connection.close()
    return statistics.median(seconds[1:])


def measure(run, texts, client_counts, seconds_limit):
    rates, program_seconds, reference = offline(run, texts)
    modes = {"batched (default)": (), "one at a time (--max-batch-sentences 1)": ("--max-batch-sentences", "1")}
    rows, same, alone = [], {}, None
    for mode, flags in modes.items():
        with ServerProcess(["--model", f"es-en={run}", *flags], start_timeout=START_TIMEOUT,
                           stop_timeout=120) as server:
            _load(server.url, texts[: max(client_counts)], max(client_counts), 60)  # warm-up
            if alone is None:
                alone = _alone(server.url)
            for clients in client_counts:
                row, answers = _load(server.url, texts, clients, seconds_limit)
                rows.append({"mode": mode, **row})
                same[f"{mode}, {clients} clients"] = [sum(answers[i] == reference[i] for i in answers), len(answers)]
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if server.process.returncode != 0:
            raise RuntimeError(f"the server exited with {server.process.returncode}:\n"
                               + "\n".join(server.log_lines[-20:]))
    return {"offline_sentences_per_second": rates, "program_seconds_alone": program_seconds,
            "server_seconds_alone": alone, "rows": rows, "same_as_offline": same}


def report(results):
    rows = results["rows"]
    ceiling = results["offline_sentences_per_second"]["evaluate's program"]
    lines = [f"# `keras-transformer serve` under load ({results['machine']})", "",
             f"Model: `{results['model']}`, beam 4, {results['sentences']} test sentences, one a request. "
             f"Command: `{results['command']}`.", "",
             "| server | clients | requests | sentences/s | p50 ms | p99 ms | of offline | client CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['mode']} | {row['clients']} | {row['requests']} | {row['sentences_per_second']:.1f} | "
                     f"{row['p50_ms']:.0f} | {row['p99_ms']:.0f} | {row['sentences_per_second'] / ceiling:.0%} | "
                     f"{row['client_cpu_seconds']:.2f} |")
    for label, rate in results["offline_sentences_per_second"].items():
        lines.append(f"| offline, {label} | - | {results['sentences']} | {rate:.1f} | - | - | "
                     f"{rate / ceiling:.0%} | - |")
    by = {(row["mode"], row["clients"]): row["sentences_per_second"] for row in rows}
    most = max(row["clients"] for row in rows)
    batched, single = by.get(("batched (default)", most)), by.get(("one at a time (--max-batch-sentences 1)", most))
    lines += ["", f"At {most} clients: batching gives {batched / single:.1f}x the one-at-a-time throughput and "
                  f"{batched / ceiling:.0%} of the offline figure." if batched and single else "",
              f"One short sentence alone ({SHORT_SENTENCE!r}): the server answers in "
              f"{1000 * results['server_seconds_alone']:.0f} ms (median of 20, HTTP included); the decoding "
              f"program alone takes {1000 * results['program_seconds_alone']:.0f} ms "
              f"({results['server_seconds_alone'] / results['program_seconds_alone']:.2f}x).", "",
              "Translations the same as offline (first hypothesis): " + "; ".join(
                  f"{key}: {count}/{total}" for key, (count, total) in results["same_as_offline"].items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a run folder")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--requests", type=int, default=None, help="sentences of the test split (default: all)")
    parser.add_argument("--seconds", type=float, default=120, help="the most seconds a level runs")
    args = parser.parse_args(argv)
    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.machine import describe_cpu

    texts = [pair.source for pair in ParallelCorpus().read().require("test")][: args.requests]
    results = measure(pathlib.Path(args.model), texts, args.clients, args.seconds)
    results.update(machine=describe_cpu(), model=str(args.model), sentences=len(texts),
                   command="python -m benchmarks.serving_load " + " ".join(argv or sys.argv[1:]))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "jax")
    main()
