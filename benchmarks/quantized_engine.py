"""A decoding step of the compiled engine, float32 and quantized, against CTranslate2's float32 and int8.

    python -m benchmarks.quantized_engine --out benchmarks/results/cpu-quantized-engine

Builds offline a random `MarianMTModel` of opus-mt-es-en's shape (as
`benchmarks.import_wait`: `tests/marian_fixtures.py`), imports it with
`keras-transformer import`, and converts the same folder with
CTranslate2's own converter (`ct2-transformers-converter`, `--quantization
float32` and `int8`). With random weights every hypothesis runs to the limit of
`--new-tokens` (127), so a call's time over its steps is the time of a
step. For each search (greedy, beam 4) and each number of sentences a call
(one, and the compiled engine's batch on a CPU: 8 greedy, 4 beam, so that
a call is one batch, its rows not padded), each
engine translates the same sentence that many times in one call: one call
to warm up, then `--repeats` calls, median. Engines: the compiled engine
(`load_compiled_translator`, the imported run's default search with
`max_new_tokens`; its program written first by a child `translate`), as
float32 and after Keras' `model.quantize` (`--quantize`); CTranslate2's
`translate_batch` on every core (`intra_threads`), float32 and int8, and with
`--ctranslate2-per-core` one worker a core (`inter_threads`). With
`--lone-rows N`, greedy search's lone sentence also runs quantized in N
rows, its copies' translations dropped: where XLA hands a product of one
row to its own code and one of several to YNNPACK's int8 kernel.

Writes `results.json` and `results.md` to `--out`.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.import_wait import SHAPES
from benchmarks.machine import cpu_name

SENTENCE = "¿Dónde está el niño? Tiene 123 ovejas."
SEARCHES = {"greedy": (1, 8), "beam 4": (4, 4)}  # beam width, the engine's batch on a CPU


def _engine(run, beam, new_tokens, quantize, lone_rows=None):
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache
    from keras_transformer_runtime.search_defaults import resolve_search

    search = resolve_search(str(run), max_new_tokens=new_tokens)
    translator = load_compiled_translator(
        str(run), ProgramCache(), search.decoding.replace(beam_width=beam),
        write=write_program_in_a_child, quantize=quantize)
    if lone_rows:
        translator.lone_sentence_rows = lone_rows  # the sentence repeated, the copies' translations dropped

    def translate(rows):
        return [len(text.split()) for text in translator([SENTENCE] * rows)]

    return translate


def _ctranslate2(folder, source_model, beam, new_tokens, per_core=False):
    import ctranslate2
    import sentencepiece

    cores = os.cpu_count()
    threads = dict(inter_threads=cores, intra_threads=1) if per_core else dict(inter_threads=1, intra_threads=cores)
    translator = ctranslate2.Translator(str(folder), device="cpu", **threads)
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(source_model)).encode(SENTENCE, out_type=str)

    def translate(rows):
        # A batch a core: the call's sentences split into one batch per worker, decoded side by side.
        batch = -(-rows // cores) if per_core else rows
        results = translator.translate_batch([pieces + ["</s>"]] * rows, beam_size=beam, max_batch_size=batch,
                                             max_decoding_length=new_tokens)
        return [len(result.hypotheses[0]) for result in results]

    return translate


def time_calls(translate, rows, repeats):
    """`(median seconds a call, the lengths of the last call's outputs)`, after one call that warms up."""
    translate(rows)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        lengths = translate(rows)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), lengths


def measure(work, repeats, new_tokens, quantize, shape="opus-mt", lone_rows=None, per_core=False):
    """One row per engine, search and number of sentences: ms a step and the outputs' lengths.

    With `lone_rows`, one engine more for greedy search: the quantized one
    decoding a lone sentence in that many rows (a matrix product where one
    row is a vector's). With `per_core`, CTranslate2 twice more: one worker
    a core, one thread each, a call's sentences split between them.
    """
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    from marian_fixtures import make_marian_folder

    sizes = {key: value for key, value in SHAPES[shape].items() if value is not None}
    folder = pathlib.Path(make_marian_folder(work / f"{shape}-shape", **sizes))
    run = work / "run"
    subprocess.run([sys.executable, "-m", "keras_transformer_cli", "import", str(folder), "--output", str(run)],
                   check=True, capture_output=True)
    converted = {}
    for quantization in ("float32", "int8"):
        converted[quantization] = work / f"ctranslate2-{quantization}"
        subprocess.run([sys.executable, "-m", "ctranslate2.converters.transformers", "--model", str(folder),
                        "--output_dir", str(converted[quantization]), "--quantization", quantization],
                       check=True, capture_output=True)
    rows = []
    for search, (beam, batch) in SEARCHES.items():
        engines = {"engine float32": _engine(run, beam, new_tokens, None),
                   f"engine {quantize}": _engine(run, beam, new_tokens, quantize),
                   "CTranslate2 float32": _ctranslate2(converted["float32"], folder / "source.spm", beam, new_tokens),
                   "CTranslate2 int8": _ctranslate2(converted["int8"], folder / "source.spm", beam, new_tokens)}
        if per_core:
            for quantization in ("float32", "int8"):
                engines[f"CTranslate2 {quantization}, a batch a core"] = _ctranslate2(
                    converted[quantization], folder / "source.spm", beam, new_tokens, per_core=True)
        if lone_rows and beam == 1:  # a beam's lone sentence has its beam's rows already
            engines[f"engine {quantize}, a lone sentence in {lone_rows} rows"] = _engine(run, beam, new_tokens,
                                                                                       quantize, lone_rows)
        for sentences in (1, batch):
            for name, translate in engines.items():
                if sentences > 1 and name.endswith(" rows"):
                    continue  # only a lone sentence is padded
                seconds, lengths = time_calls(translate, sentences, repeats)
                rows.append({"engine": name, "search": search, "sentences": sentences, "seconds": seconds,
                             "ms_a_step": 1000 * seconds / new_tokens, "output_lengths": lengths})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def write_report(rows, out, command, quantize, shape="opus-mt"):
    """`results.json` and `results.md` (ms a step, and each engine against CTranslate2 int8) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=2) + "\n")
    engines = list(dict.fromkeys(row["engine"] for row in rows))
    lines = [f"# A decoding step at {shape} shape: the compiled engine (float32, {quantize}) and CTranslate2",
             "", f"`{command}` on {cpu_name()}; ms a step (a call over its steps, median).", "",
             "| search | sentences a call | " + " | ".join(engines) + f" | engine {quantize} / CTranslate2 int8, "
             "the faster of each |",
             "|---|---:|" + "---:|" * (len(engines) + 1)]
    for search, sentences in dict.fromkeys((row["search"], row["sentences"]) for row in rows):
        cells = {row["engine"]: row["ms_a_step"] for row in rows
                 if row["search"] == search and row["sentences"] == sentences}
        fastest = min(cells[name] for name in cells if name.startswith("CTranslate2 int8"))
        ratio = fastest / min(cells[name] for name in cells if name.startswith(f"engine {quantize}"))
        lines.append(f"| {search} | {sentences} | " + " | ".join(f"{cells[name]:.2f}" if name in cells else "—"
                                                             for name in engines)
                     + f" | {ratio:.2f}x |")
    lines += ["", "The ratio is CTranslate2 int8's time over the engine's, the faster setting of each: above 1, "
              "the engine is faster."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls after the warm one (default: 5)")
    parser.add_argument("--new-tokens", type=int, default=127, help="steps a hypothesis runs (default: 127)")
    parser.add_argument("--quantize", default="int8", choices=("int8", "int4"), help="the engine's Keras mode")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="opus-mt", help="tiny: a smoke test in a minute")
    parser.add_argument("--ctranslate2-per-core", action="store_true",
                        help="also CTranslate2 with one worker a core, a call's sentences split between them")
    parser.add_argument("--lone-rows", type=int, help="also the quantized engine with a lone sentence in this many "
                        "rows (its copies' translations dropped)")
    args = parser.parse_args(argv)
    kept = os.environ.get("KERAS_TRANSFORMER_CACHE_DIR")
    with tempfile.TemporaryDirectory() as work:
        os.environ["KERAS_TRANSFORMER_CACHE_DIR"] = str(pathlib.Path(work) / "cache")  # the child writers' cache too
        try:
            rows = measure(pathlib.Path(work), args.repeats, args.new_tokens, args.quantize, args.shape,
                           args.lone_rows, args.ctranslate2_per_core)
        finally:
            if kept is None:
                os.environ.pop("KERAS_TRANSFORMER_CACHE_DIR")
            else:
                os.environ["KERAS_TRANSFORMER_CACHE_DIR"] = kept
    command = "python -m benchmarks.quantized_engine " + " ".join(argv if argv is not None else sys.argv[1:])
    print(write_report(rows, pathlib.Path(args.out), command, args.quantize, args.shape))


if __name__ == "__main__":
    main()
