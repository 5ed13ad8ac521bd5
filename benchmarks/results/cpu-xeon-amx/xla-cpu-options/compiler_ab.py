"""Ad hoc: the engine's programs compiled with other XLA CPU options, against its own, in one process, alternating.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/xla-cpu-options/compiler_ab.py \
        MODEL BEAM ROUNDS "NAME=option:value;option:value" ...

Every plan loads the engine's translator for MODEL and BEAM; the engine's
`compile_for_cpu` is replaced by one that compiles with the plan's options
(an empty value: the option set to ""). The 605 test sentences in one call
each way, in turn, after a round that compiles every shape. Prints
sentences/s (median of the rounds), the ratio to the engine's own options and
whether the translations are the same.
"""
import statistics
import sys
import time

import keras_transformer_runtime.compiled_translator as compiled_translator
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.program_cache import ProgramCache

model, beam, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plans = {"engine": None}
for spec in sys.argv[4:]:
    name, options = spec.split("=", 1)
    plans[name] = dict(pair.split(":", 1) for pair in options.split(";")) if options else {}
current = [None]
engine_compile = compiled_translator.compile_for_cpu


def compile_with_the_plans_options(lowered, weights, flags=None):
    if current[0] is None:
        return engine_compile(lowered, weights, flags)
    return lowered.compile(compiler_options=current[0])


compiled_translator.compile_for_cpu = compile_with_the_plans_options
sources = [pair.source for pair in load_bible_pairs("test")]
translators = {name: compiled_translator.load_compiled_translator(model, ProgramCache(), beam_width=beam,
                                                                  write=write_program_in_a_child)
               for name in plans}
seconds = {name: [] for name in plans}
outputs = {}
for number in range(rounds + 1):
    for name, translator in translators.items():
        current[0] = plans[name]  # the first round compiles each shape under it
        start = time.perf_counter()
        outputs[name] = translator(sources)
        if number:
            seconds[name].append(time.perf_counter() - start)
rates = {name: len(sources) / statistics.median(values) for name, values in seconds.items()}
for name in rates:
    print(f"{model} beam {beam} {name}: {rates[name]:.1f} sent/s, {rates[name] / rates['engine']:.3f}x, "
          f"same {outputs[name] == outputs['engine']}", flush=True)
