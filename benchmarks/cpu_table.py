"""NLLB-200's shapes on a CPU: this package (float32, int8), CTranslate2 (float32, int8) and transformers.

For each shape (`nllb-600m`, NLLB-200-distilled-600M's; `nllb-1.3b`, NLLB-200-1.3B's: 24 + 24 layers,
1,024 wide, feed-forward 8,192; random weights, built offline as `benchmarks.model_import` builds them;
`tiny-nllb`: a smoke test), each number of sentences (the bundled corpus' first Spanish verses) and each
search (greedy, beam 4), every system translates in a fresh process as its users run it, Spanish to
English, `--max-new-tokens` tokens after the target's language code (random weights: most sentences run
to the limit; CTranslate2's and transformers' cells count the tokens their best hypotheses hold, this
package's `translate` prints text only, and each cell counts the translations equal to transformers'):

- `keras-transformer translate` on the imported run, float32 and `--quantize int8`, the second call (a
  first, untimed, writes the program), with the cap on run-away output off as the others have none; its
  decoding is `--verbose`'s `work` phase;
- CTranslate2 on `ct2-transformers-converter`'s conversion (float32, `--quantization int8`), as its NLLB
  example runs it (transformers' tokenizer, one `translate_batch`, one translator on every core);
- transformers' `generate`, the sentences in one call.

Each cell: the whole process' wall time (what the user waits for), its decoding alone and the process'
own peak resident memory (`import_wait.run_process`); medians of `--repeats` rounds (`--bulk-repeats` for
more than one sentence), each round one system after another.

    python -m benchmarks.cpu_table --out benchmarks/results/cpu-nllb-table
    python -m benchmarks.cpu_table --shapes tiny-nllb --sentences 1 3 --repeats 1 --out /tmp/t  # a smoke test

Writes `results.json` (every run) and `results.md` (the table) to `--out` after each row: an interrupted run
keeps the rows it finished.
"""

import argparse
import gzip
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.import_wait import run_process
from benchmarks.machine import cpu_name
from benchmarks.model_import import build
from benchmarks.verb_wait import phases_of

LANGUAGES = ("spa_Latn", "eng_Latn")
SYSTEMS = ("float32", "int8", "CTranslate2 float32", "CTranslate2 int8", "transformers")
_CORPUS = pathlib.Path(__file__).resolve().parents[1] / "keras_transformer" / "data" / "bible_es_en.tsv.gz"

# Each prints its translations, one JSON string a line, then its load and decoding seconds and the tokens written.
_CTRANSLATE2 = """
import json, os, sys, time
start = time.perf_counter()
import ctranslate2
from transformers import AutoTokenizer
model, folder, sentences, beam, limit, source, target = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, src_lang=source)
translator = ctranslate2.Translator(model, device="cpu", intra_threads=os.cpu_count())
lines = open(sentences, encoding="utf-8").read().splitlines()
loaded = time.perf_counter() - start
start = time.perf_counter()
pieces = [tokenizer.convert_ids_to_tokens(tokenizer.encode(line)) for line in lines]
results = translator.translate_batch(pieces, target_prefix=[[target]] * len(lines), beam_size=int(beam),
                                     max_decoding_length=int(limit) + 1)
texts = [tokenizer.decode(tokenizer.convert_tokens_to_ids(result.hypotheses[0][1:]), skip_special_tokens=True)
         for result in results]
decoding = time.perf_counter() - start
print(*map(json.dumps, texts), loaded, decoding, sum(len(result.hypotheses[0]) - 1 for result in results),
      sep="\\n")
"""
_TRANSFORMERS = """
import json, sys, time
start = time.perf_counter()
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder, sentences, beam, limit, source, target = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, src_lang=source)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, local_files_only=True).eval()
lines = open(sentences, encoding="utf-8").read().splitlines()
loaded = time.perf_counter() - start
start = time.perf_counter()
with torch.no_grad():
    rows = model.generate(**tokenizer(lines, return_tensors="pt", padding=True), num_beams=int(beam),
                          do_sample=False, max_new_tokens=int(limit) + 1, min_length=0,
                          forced_bos_token_id=tokenizer.convert_tokens_to_ids(target))
texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
decoding = time.perf_counter() - start
# Each row: the start token, the language code, then the tokens, </s> and padding after an early end.
written = ~torch.isin(rows[:, 2:], torch.tensor([model.config.pad_token_id, model.config.eos_token_id]))
print(*map(json.dumps, texts), loaded, decoding, int(written.sum()), sep="\\n")
"""


def spanish_sentences(count):
    """The bundled corpus' first `count` Spanish verses."""
    with gzip.open(_CORPUS, "rt", encoding="utf-8") as lines:
        columns = next(lines).rstrip("\n").split("\t")
        verses = [line.rstrip("\n").split("\t")[columns.index("es")] for _, line in zip(range(count), lines)]
    return verses


def prepare(work, shape):
    """Builds `shape`'s folder, imports it and converts it for CTranslate2 (once: kept in `work`); the paths."""
    paths = {"folder": work / f"{shape}-shape", "run": work / f"{shape}-run",
             "CTranslate2 float32": work / f"{shape}-ct2-float32", "CTranslate2 int8": work / f"{shape}-ct2-int8"}
    if not (paths["folder"] / "model.safetensors").exists():
        build(work, shape)
    if not (paths["run"] / "model.keras").exists():
        run_process([sys.executable, "-m", "keras_transformer_cli", "import", paths["folder"], "--output",
                     paths["run"]])
    for quantization in ("float32", "int8"):
        converted = paths[f"CTranslate2 {quantization}"]
        if not (converted / "model.bin").exists():
            subprocess.run([str(pathlib.Path(sys.executable).parent / "ct2-transformers-converter"), "--model",
                            str(paths["folder"]), "--output_dir", str(converted), "--force", "--quantization",
                            quantization], check=True, capture_output=True)
    return paths


def system_command(system, paths, sentences_file, texts, beam, limit):
    """The argv that translates `texts` (also in `sentences_file`) as `system`'s users run it."""
    if system in ("float32", "int8"):
        quantize = ["--quantize", "int8"] if system == "int8" else []
        return [sys.executable, "-m", "keras_transformer_cli", "--verbose", "translate", "--model", paths["run"],
                "--beam", beam, "--max-new-tokens", limit + 1, "--max-output-ratio", 0, "--no-repeat-ngram", 0,
                "--source-language", LANGUAGES[0], "--target-language", LANGUAGES[1], *quantize, *texts]
    if system == "transformers":
        return [sys.executable, "-c", _TRANSFORMERS, paths["folder"], sentences_file, beam, limit, *LANGUAGES]
    return [sys.executable, "-c", _CTRANSLATE2, paths[system], paths["folder"], sentences_file, beam, limit,
            *LANGUAGES]


def measure_once(system, argv, env, sentences):
    """One fresh process: its wall, decoding seconds, peak MB, tokens written (None: not told) and texts."""
    wall, peak, stdout, stderr = run_process(argv, env)
    lines = stdout.splitlines()
    if system in ("float32", "int8"):
        texts, decoding, tokens = lines, phases_of(stderr)["work"], None
        if len(texts) != sentences:
            raise RuntimeError(f"{system}: {len(texts)} of {sentences} translations printed: {stderr[-2000:]}")
    else:
        texts, decoding, tokens = [json.loads(line) for line in lines[:-3]], float(lines[-2]), int(lines[-1])
    return {"wall_s": wall, "decoding_s": decoding, "peak_mb": peak, "tokens": tokens, "texts": texts}


def measure(work, shapes, counts, beams, limit, repeats, bulk_repeats, done=lambda cells: None):
    """Every cell: `{shape, sentences, beam, system, runs: [...]}` a list, rounds in turn (see the module).

    `done(cells)` is called with the cells so far after each row, so an interrupted run keeps them.
    """
    env = dict(os.environ, KERAS_BACKEND="jax", KERAS_TRANSFORMER_CACHE_DIR=str(work / "cache"))
    cells = []
    for shape in shapes:
        paths = prepare(work, shape)
        for count in counts:
            texts = spanish_sentences(count)
            sentences_file = work / f"sentences-{count}.txt"
            sentences_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
            for beam in beams:
                argvs = {system: system_command(system, paths, sentences_file, texts, beam, limit)
                         for system in SYSTEMS}
                for system in ("float32", "int8"):
                    run_process(argvs[system], env)  # the first call writes the program
                runs = {system: [] for system in SYSTEMS}
                for _ in range(repeats if count == 1 else bulk_repeats):
                    for system in SYSTEMS:
                        runs[system].append(measure_once(system, argvs[system], env, count))
                        print(shape, count, beam, system, {key: value for key, value in runs[system][-1].items()
                                                           if key != "texts"}, flush=True)
                theirs = runs["transformers"][0]["texts"]
                for system in SYSTEMS:
                    translations = [run.pop("texts") for run in runs[system]][0]
                    cells.append({"shape": shape, "sentences": count, "beam": beam, "system": system,
                                  "same_translations_as_transformers": sum(map(str.__eq__, translations, theirs)),
                                  **{key: statistics.median(run[key] for run in runs[system])
                                     for key in ("wall_s", "decoding_s", "peak_mb")},
                                  "tokens": runs[system][0]["tokens"], "runs": runs[system]})
                done(cells)
    return cells


def table(cells):
    """The Markdown table: a row a shape, sentences and search; wall / decoding / peak GiB a system."""
    names = [f"keras-transformer {name}" if name in ("float32", "int8") else name for name in SYSTEMS]
    lines = ["| shape | sentences | search | " + " | ".join(names) + " |", "|---|---:|---|" + "---:|" * len(SYSTEMS)]
    for key in dict.fromkeys((cell["shape"], cell["sentences"], cell["beam"]) for cell in cells):
        row = {cell["system"]: cell for cell in cells if (cell["shape"], cell["sentences"], cell["beam"]) == key}
        search = "greedy" if key[2] == 1 else f"beam {key[2]}"
        lines.append(f"| {key[0]} | {key[1]} | {search} | " + " | ".join(
            f"{row[name]['wall_s']:.2f} / {row[name]['decoding_s']:.2f} s / {row[name]['peak_mb'] / 1024:.2f} GiB"
            for name in SYSTEMS) + " |")
    return lines


def main(argv=None):
    """Measures the table (see the module) and writes `results.json` and `results.md` in `--out`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["nllb-600m", "nllb-1.3b"],
                        choices=["nllb-600m", "nllb-1.3b", "tiny-nllb"])
    parser.add_argument("--sentences", nargs="+", type=int, default=[1, 100], help="sentences a call, each a row")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens after the language code")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of one sentence's rows")
    parser.add_argument("--bulk-repeats", type=int, default=1, help="rounds of the rows of several sentences")
    parser.add_argument("--work", help="where the models are built and kept (default: a temporary folder)")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    command = "python -m benchmarks.cpu_table " + " ".join(argv if argv is not None else sys.argv[1:])

    def write(cells):
        figures = {"command": command, "cpu": cpu_name(), "cores": os.cpu_count(), "cells": cells,
                   "benchmark_wall_seconds": round(time.perf_counter() - start, 1)}
        write_results(out, figures, args.max_new_tokens)

    with tempfile.TemporaryDirectory() as temporary:
        work = pathlib.Path(args.work or temporary)
        work.mkdir(parents=True, exist_ok=True)
        measure(work, args.shapes, args.sentences, args.beams, args.max_new_tokens, args.repeats,
                args.bulk_repeats, done=write)


def write_results(out, figures, max_new_tokens):
    """`results.json` (every run) and `results.md` (the table) in `out`, as the rows measured so far."""
    (out / "results.json").write_text(json.dumps(figures, indent=2, ensure_ascii=False, default=str) + "\n")
    lines = ["# NLLB-200's shapes on a CPU, side by side", "",
             f"`{figures['command']}` on {figures['cpu']}; each cell: the whole process' wall / "
             f"its decoding / its peak resident memory, medians; {max_new_tokens} tokens after the language "
             "code a sentence.", "", *table(figures["cells"])]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
