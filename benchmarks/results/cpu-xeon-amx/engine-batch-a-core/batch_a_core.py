"""Ad hoc: the engine's int8 at opus-mt's shape, 8 greedy sentences (4 beam) as one batch or a batch a core."""
import os, pathlib, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, str(pathlib.Path.cwd() / "tests"))  # run from the repository root
from marian_fixtures import make_marian_folder
from benchmarks.import_wait import SHAPES
from benchmarks.quantized_engine import SENTENCE
work = pathlib.Path(tempfile.mkdtemp())
os.environ["KERAS_TRANSFORMER_CACHE_DIR"] = str(work / "cache")
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache
from keras_transformer_runtime.search_defaults import resolve_search
sizes = {k: v for k, v in SHAPES["opus-mt"].items() if v is not None}
folder = pathlib.Path(make_marian_folder(work / "opus", **sizes))
run = work / "run"
subprocess.run([sys.executable, "-m", "keras_transformer_cli", "import", str(folder), "--output", str(run)], check=True, capture_output=True)
for beam, sentences in ((1, 8), (4, 4)):
    search = resolve_search(str(run), max_new_tokens=127)
    common = dict(beam_width=beam, length_penalty=search.length_penalty, no_repeat_ngram_size=search.no_repeat_ngram,
                  beam_search=search.beam_search, early_stopping=search.early_stopping, max_new_tokens=127,
                  write=write_program_in_a_child, quantize="int8")
    settings = {"one batch": dict(batch_size=sentences, parallel_batches=1),
                "a batch a core": dict(batch_size=sentences // 2, parallel_batches=2)}
    translators = {name: load_compiled_translator(str(run), ProgramCache(), **common, **s) for name, s in settings.items()}
    times = {name: [] for name in settings}
    for name, t in translators.items():
        t([SENTENCE] * sentences)
    for _ in range(5):
        for name, t in translators.items():
            start = time.perf_counter(); t([SENTENCE] * sentences); times[name].append(time.perf_counter() - start)
    print("beam", beam, sentences, {name: round(1000 * statistics.median(v) / 127, 2) for name, v in times.items()}, flush=True)
