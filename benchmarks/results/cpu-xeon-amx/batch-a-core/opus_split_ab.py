"""Ad hoc: the engine at opus-mt's shape, a call of the engine's batch whole or split into a batch a core, one process.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/batch-a-core/opus_split_ab.py OPUS_RUN

`benchmarks.quantized_engine`'s sentence, 8 greedy (4 beam 4) a call, 127 steps each, float32 and int8:
the same translator with `batch_cores` 1 (whole) and a core each (split; the default where the
weights take at most 128 MiB), alternating; ms a step, median of 5 calls after one that warms up each.
"""
import statistics
import sys
import time

from benchmarks.quantized_engine import SENTENCE
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.batch_threads import usable_cores
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache

run = sys.argv[1]
for quantize in (None, "int8"):
    for beam, sentences in ((1, 8), (4, 4)):
        translator = load_compiled_translator(run, ProgramCache(), beam_width=beam, max_new_tokens=127,
                                              quantize=quantize, write=write_program_in_a_child)
        default = translator.batch_cores
        settings = {"whole": 1, "split": min(usable_cores(), translator.parallel_batches)}
        times = {name: [] for name in settings}
        outputs = {}
        for repeat in range(6):
            for name, cores in settings.items():
                translator.batch_cores = cores
                start = time.perf_counter()
                outputs[name] = translator([SENTENCE] * sentences)
                if repeat:
                    times[name].append(time.perf_counter() - start)
        steps = {name: 1000 * statistics.median(seconds) / 127 for name, seconds in times.items()}
        print(f"{quantize or 'float32'} beam {beam}, {sentences} a call, default batch_cores {default}: "
              f"whole {steps['whole']:.2f} ms a step, split {steps['split']:.2f} "
              f"({steps['whole'] / steps['split']:.2f}x), same output {outputs['whole'] == outputs['split']}",
              flush=True)
