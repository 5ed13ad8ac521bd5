"""Ad hoc: the engine's queues (refilling program) against its batches (batch program), alternating in one process.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/refill/refill_ab.py /tmp/s7/es-en int8 5

The 605 test sentences in one greedy call each way, after a pass that compiles every shape; prints
sentences/s each way (median of the rounds) and the ratio.
"""
import statistics
import sys
import time

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache

model, quantize, rounds = sys.argv[1], (None if sys.argv[2] == "none" else sys.argv[2]), int(sys.argv[3])
sources = [pair.source for pair in load_bible_pairs("test")]
translator = load_compiled_translator(model, ProgramCache(), beam_width=1, write=write_program_in_a_child,
                                      quantize=quantize)
queue_size = translator.queue_size
seconds = {"queues": [], "batches": []}
for number in range(rounds + 1):
    for name, size in (("queues", queue_size), ("batches", None)):
        translator.queue_size = size
        start = time.perf_counter()
        translator(sources)
        if number:  # the first round compiles
            seconds[name].append(time.perf_counter() - start)
rates = {name: len(sources) / statistics.median(values) for name, values in seconds.items()}
print(f"{model} {quantize}: queues {rates['queues']:.1f}, batches {rates['batches']:.1f} sentences/s, "
      f"{rates['queues'] / rates['batches']:.2f}x")
