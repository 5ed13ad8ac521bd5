"""Ad hoc: the engine's queues (refilling program) against its batches, beam 4, alternating in one process.

Needs the engine change of `engine-beam-refill-not-taken.patch` (on 712a7f0), which gives a kept beam a
refilling program of 4 slots; `BEAM_SLOTS=8` needs the two-line variant the README names.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/refill-beam/beam_refill_ab.py MODEL 4 3 16,32,64
    PAR=1 ...   # the translator's parallel_batches (default: the engine's, 3 on 2 cores)

The 605 test sentences in one call each way, after a pass that compiles every shape; prints
sentences/s each way (median of the rounds), the ratio to the batches, and whether the
translations are the batches'.
"""
import os
import statistics
import sys
import time

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache

model, beam, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sizes = [int(s) for s in sys.argv[4].split(",")] if len(sys.argv) > 4 else [64]
sources = [pair.source for pair in load_bible_pairs("test")]
translator = load_compiled_translator(model, ProgramCache(), beam_width=beam, write=write_program_in_a_child)
if os.environ.get("PAR"):
    translator.parallel_batches = int(os.environ["PAR"])
print("batch", translator.batch_size, "parallel", translator.parallel_batches, "cores", translator.batch_cores)
plans = [(f"queues of {s}", s) for s in sizes] + [("batches", None)]
seconds = {name: [] for name, _ in plans}
outputs = {}
for number in range(rounds + 1):
    for name, size in plans:
        translator.queue_size = size
        start = time.perf_counter()
        outputs[name] = translator(sources)
        if number:  # the first round compiles
            seconds[name].append(time.perf_counter() - start)
rates = {name: len(sources) / statistics.median(values) for name, values in seconds.items()}
for name in rates:
    print(f"{model} beam {beam} {name}: {rates[name]:.1f} sent/s, {rates[name] / rates['batches']:.3f}x, "
          f"same {outputs[name] == outputs['batches']}")
