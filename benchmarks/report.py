"""The report of `benchmarks.run`: rates per statistic, ratios to KerasHub, the Markdown table, the files.

Apart from `run` so that `benchmarks.per_process`, which merges the
reports of several processes, needs only this module, not the harness.
"""

import json
import os
import statistics

# The implementation the ratios are taken against the others from.
OURS = "keras_transformer"


def _ratio(ours, theirs):
    if ours is None or theirs is None or not theirs:
        return None
    return ours / theirs


# "median": median wall time (the headline); "best": the fastest repeat's
# wall time; "cpu": median CPU time of the process, which other processes on
# a shared CPU barely change (with --threads 1 it is the wall time the run
# would take alone on one core).
STATISTICS = ("median", "best", "cpu")
# Rates, with the wall and CPU repeat times they come from. The work per
# repeat is fixed, so another statistic's rate is the median rate scaled by
# median wall time / that statistic's time.
_RATES = {
    "train": (
        ("tokens_per_second", "seconds_per_step_repeats", "cpu_seconds_per_step_repeats"),
        ("achieved_flops_per_second", "seconds_per_step_repeats", "cpu_seconds_per_step_repeats"),
        ("mfu", "seconds_per_step_repeats", "cpu_seconds_per_step_repeats"),
    ),
    "encode": (
        ("tokens_per_second", "seconds_repeats", "cpu_seconds_repeats"),
        ("to_host_tokens_per_second", "to_host_seconds_repeats", "to_host_cpu_seconds_repeats"),
    ),
    "decode": (
        ("cached_tokens_per_second", "cached_seconds_repeats", "cached_cpu_seconds_repeats"),
        ("uncached_tokens_per_second", "uncached_seconds_repeats", "uncached_cpu_seconds_repeats"),
    ),
}


def add_derived_rates(results):
    """Adds `<rate>_best` (fastest repeat) and `<rate>_cpu` (median CPU time) beside every median rate.

    Args:
        results: list of `benchmark_seq_len` dicts, changed in place.

    Returns:
        `results`.

    Example:

    >>> rows = add_derived_rates([{"encode": {"tokens_per_second": 10.0, "seconds_repeats": [1.0, 2.0, 4.0],
    ...                                       "cpu_seconds_repeats": [0.5, 0.5, 0.6]}}])
    >>> rows[0]["encode"]["tokens_per_second_best"], rows[0]["encode"]["tokens_per_second_cpu"]
    (20.0, 40.0)
    """
    for row in results:
        for phase, fields in _RATES.items():
            data = row.get(phase) or {}
            for rate, wall, cpu in fields:
                if data.get(rate) is None or not data.get(wall):
                    continue
                median = statistics.median(data[wall])
                if min(data[wall]) > 0:
                    data[f"{rate}_best"] = data[rate] * median / min(data[wall])
                if data.get(cpu) and statistics.median(data[cpu]) > 0:
                    data[f"{rate}_cpu"] = data[rate] * median / statistics.median(data[cpu])
    return results


def _get(data, name, statistic):
    return (data or {}).get(name if statistic == "median" else f"{name}_{statistic}")


def summary_ratios(results, statistic="median"):
    """The issue's headline ratios, per sequence length.

    Args:
        results: list of `benchmark_seq_len` dicts (after `add_derived_rates`
            for a statistic other than `"median"`).
        statistic: one of `STATISTICS`.

    Returns:
        dict `{seq_len: {name: ratio}}`: training and encoder speed of this
        package over each other implementation, and cached greedy decoding
        over each uncached loop (the tutorial's is the issue's target).
    """
    ratios = {}
    for seq_len in sorted({r["seq_len"] for r in results}):
        rows = {r["implementation"]: r for r in results if r["seq_len"] == seq_len}
        ours = rows.get(OURS)
        if ours is None:
            continue
        found = {}
        for name, row in rows.items():
            if name == OURS:
                continue
            for phase in ("train", "encode"):
                value = _ratio(_get(ours.get(phase), "tokens_per_second", statistic),
                               _get(row.get(phase), "tokens_per_second", statistic))
                if value is not None:
                    found[f"{phase}_speedup_vs_{name}"] = value
        cached = _get(ours.get("decode"), "cached_tokens_per_second", statistic)
        for name, row in rows.items():
            value = _ratio(cached, _get(row.get("decode"), "uncached_tokens_per_second", statistic))
            if value is not None:
                found[f"cached_decode_speedup_vs_{name}_uncached"] = value
        value = _ratio(cached, _get(rows.get("keras_hub", {}).get("decode"), "cached_tokens_per_second", statistic))
        if value is not None:
            found["cached_decode_speedup_vs_keras_hub_cached"] = value
        ratios[str(seq_len)] = found
    return ratios


def _number(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _times(value):
    return "n/a" if value is None else f"{value:.2f}x"


def _statistic_table(report, statistic):
    meta, results = report["meta"], report["results"]
    accelerator = meta["device"]["accelerator"] is not None
    ratios_by_length = summary_ratios(results, statistic)
    title = {
        "median": "Median wall time of the repeats",
        "best": "Fastest repeat (wall time)",
        "cpu": "Median CPU time of the process (robust to other processes on a shared CPU)",
    }[statistic]
    lines = [f"### {title}", ""]
    for seq_len in sorted({r["seq_len"] for r in results}):
        rows = [r for r in results if r["seq_len"] == seq_len]
        ours = next((r for r in rows if r["implementation"] == OURS), {})
        first = rows[0]
        decode = first.get("decode", {})
        uncached_steps = decode.get("uncached_new_tokens", decode.get("new_tokens"))
        bound = ("" if uncached_steps == decode.get("new_tokens") else
                 f"; uncached: the first {uncached_steps} steps timed, "
                 f"each on the full {decode['new_tokens']}-token prefix")
        lines += [
            f"**Sequence length {seq_len}** (batch {first['batch_size']} x ({seq_len} source + {seq_len} target) "
            f"tokens; decoding: {decode.get('batch_size', '-')} sources, {decode.get('new_tokens', '-')} new tokens"
            f"{bound})",
            "",
            "| implementation | parameters | train tokens/s | vs ours | "
            + ("MFU" if accelerator else "achieved GFLOP/s")
            + " | retraces (timed) | peak memory MB | encoder tokens/s | vs ours | encoder, outputs to host "
            "| greedy cached tokens/s | greedy uncached tokens/s | cached / uncached |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            train, encode, dec = r.get("train"), r.get("encode"), r.get("decode") or {}
            if accelerator:
                mfu = _get(train, "mfu", statistic)
                compute = "n/a" if mfu is None else f"{mfu:.1%}"
            else:
                achieved = _get(train, "achieved_flops_per_second", statistic)
                compute = "n/a" if achieved is None else _number(achieved / 1e9, 1)
            memory = r.get("memory", {}).get("peak_bytes")
            traces = (train or {}).get("traces_timed")
            cached = _get(dec, "cached_tokens_per_second", statistic)
            uncached = _get(dec, "uncached_tokens_per_second", statistic)
            lines.append(
                "| " + " | ".join([
                    f"`{r['implementation']}`",
                    _number(r["parameters"]),
                    _number(_get(train, "tokens_per_second", statistic)),
                    _times(_ratio(_get(ours.get("train"), "tokens_per_second", statistic),
                                  _get(train, "tokens_per_second", statistic))),
                    compute,
                    "eager" if train and traces is None else _number(traces),
                    _number(None if memory is None else memory / 2**20),
                    _number(_get(encode, "tokens_per_second", statistic)),
                    _times(_ratio(_get(ours.get("encode"), "tokens_per_second", statistic),
                                  _get(encode, "tokens_per_second", statistic))),
                    _number(_get(encode, "to_host_tokens_per_second", statistic)),
                    _number(cached, 1) if cached is not None else ("no cache" if dec else "n/a"),
                    _number(uncached, 1),
                    _times(_ratio(cached, uncached)),
                ]) + " |"
            )
        lines.append("")
        ratios = ratios_by_length.get(str(seq_len))
        if ratios:
            lines.append("Ratios (this package over the others; > 1 means this package is faster): "
                         + "; ".join(f"{name} {_times(value)}" for name, value in ratios.items()) + ".")
            lines.append("")
    return lines


def markdown_table(report):
    """The Markdown report: medians, then the fastest repeats, per sequence length, with ratios.

    Args:
        report: the dict written to `results.json`.

    Returns:
        str.
    """
    meta, results = report["meta"], report["results"]
    lines = [
        f"Backend `{meta['device']['backend']}` on {meta['device']['name']}; config `{meta['config']}` "
        f"({meta['config_values']}); {meta['precision']}; fit jit_compile={meta['jit_compile']}; "
        f"dropout {meta['dropout']}; {meta['repeats']} repeats of {meta['steps']} training steps "
        f"(encoder: {meta.get('encode_repeats', meta['repeats'])} repeats, decoding: {meta['decode_repeats']}), "
        f"interleaved, after a warm-up; CPU threads: {meta.get('threads') or 'backend default'}; "
        f"Keras {meta['keras']}, KerasHub {meta['keras_hub']}"
        + (f", {meta['device']['backend']} {meta['device']['backend_version']}"
           if meta["device"].get("backend_version") else "") + ".",
        "",
    ]
    if meta.get("process_per_implementation"):
        lines += ["Each implementation measured in its own process."
                  + "".join(f" `{name}`: not measured ({why})." for name, why in meta.get("failed", {}).items()), ""]
    # The fastest repeats stay in results.json; CPU time means nothing for a GPU.
    shown = ("median",) if meta["device"]["accelerator"] else ("median", "cpu")
    for statistic in shown:
        lines += _statistic_table(report, statistic)
    lines.append(
        f"Memory: {results[0].get('memory', {}).get('method', 'n/a')}. "
        f"FLOPs per step from `keras_transformer/training/model_flops.py` (matmuls, 3x forward)."
    )
    return "\n".join(lines) + "\n"


def write_report(report, out):
    """Writes `results.json` and `results.md` into the folder `out`.

    Args:
        report: dict with `meta` and `results`; the best-of-repeats rates
            and the ratios are (re)computed here.
        out: str, folder (created if needed).

    Returns:
        The Markdown text.
    """
    add_derived_rates(report["results"])
    report["ratios"] = {statistic: summary_ratios(report["results"], statistic) for statistic in STATISTICS}
    return save_results(report, markdown_table(report), out)


def save_results(report, table, out):
    """Writes `report` to `out/results.json` and `table` to `out/results.md`.

    Every benchmark script leaves its results in this pair of files.

    Args:
        report: a JSON-serializable dict.
        table: str, the Markdown report.
        out: str, folder (created if needed).

    Returns:
        `table`.

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> save_results({"a": 1}, "| a |", folder)
    '| a |'
    >>> sorted(os.listdir(folder))
    ['results.json', 'results.md']
    """
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(table)
    return table
