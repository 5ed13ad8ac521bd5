"""Ad hoc: the engine's refilling greedy program at several row counts ("slots") and queue sizes, in one process.

The engine exports its refilling program for `REFILL_SLOTS` rows (8). This loads one translator a
`SLOTS:QUEUE` plan, each writing its program through a child `translate` whose module constant is set
to the plan's slots (`slots_child.py`), plus the engine's batches of 8; then translates the 605 test
sentences in one call each way, in turn, after a pass that compiles every shape.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/refill-slots/slots_ab.py MODEL 5 8:32,16:16,16:32,32:32,32:64

Prints sentences/s each way (median of the rounds), the ratio to the batches, and whether the
translations are the batches'.
"""
import os
import statistics
import sys
import time

import keras_transformer_cli.serve as serve
import keras_transformer_runtime.compiled_translator as ct
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_runtime.program_cache import ProgramCache


class _ChildPython:
    """`serve.sys` for `write_program_in_a_child`: its child runs `slots_child.py` instead of the CLI module."""

    executable = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_with_slots")
    stderr = sys.stderr


def translator(model, slots, queue):
    ct.REFILL_SLOTS = slots
    os.environ["SLOTS_AB"] = str(slots)
    loaded = ct.load_compiled_translator(model, ProgramCache(), beam_width=1, write=serve.write_program_in_a_child)
    loaded.queue_size = queue
    return loaded


model, rounds = sys.argv[1], int(sys.argv[2])
plans = [tuple(int(n) for n in plan.split(":")) for plan in sys.argv[3].split(",")]
sources = [pair.source for pair in load_bible_pairs("test")]
os.environ["SLOTS_AB_PYTHON"] = sys.executable
serve.sys = _ChildPython
translators = {f"slots {slots} queue {queue}": translator(model, slots, queue) for slots, queue in plans}
translators["batches"] = translator(model, 8, None)
seconds = {name: [] for name in translators}
outputs = {}
for number in range(rounds + 1):
    for name, each in translators.items():
        start = time.perf_counter()
        outputs[name] = each(sources)
        if number:  # the first round compiles
            seconds[name].append(time.perf_counter() - start)
rates = {name: len(sources) / statistics.median(values) for name, values in seconds.items()}
for name in rates:
    print(f"{model} {name}: {rates[name]:.1f} sent/s, {rates[name] / rates['batches']:.3f}x, "
          f"same {outputs[name] == outputs['batches']}", flush=True)
