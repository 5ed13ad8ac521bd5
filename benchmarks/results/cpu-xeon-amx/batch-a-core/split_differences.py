"""Ad hoc: how many of the 605 test translations a batch a core changes, and BLEU, in one process.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/batch-a-core/split_differences.py \
        /tmp/s7/es-en 4 int8

The test sentences in calls of the engine's batch size, each call whole (`batch_cores = 1`) and split
into a batch a core (the engine's default), and in one call; the same program throughout.
"""
import sys

import sacrebleu

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache

model, beam, quantize = sys.argv[1], int(sys.argv[2]), (None if sys.argv[3] == "none" else sys.argv[3])
pairs = load_bible_pairs("test")
sources, references = [pair.source for pair in pairs], [[pair.target for pair in pairs]]
translator = load_compiled_translator(model, ProgramCache(), beam_width=beam, write=write_program_in_a_child,
                                      quantize=quantize)
size, cores = translator.batch_size, translator.batch_cores


def in_calls():
    return [text for start in range(0, len(sources), size) for text in translator(sources[start:start + size])]


translator.batch_cores = 1
whole = in_calls()
translator.batch_cores = cores
split = in_calls()
translator.batch_cores = 1
one_call = translator(sources)
for name, output in (("calls whole", whole), (f"calls split over {cores} cores", split), ("one call", one_call)):
    print(f"{name}: {sum(a != b for a, b in zip(output, whole))} differ from calls whole, "
          f"BLEU {sacrebleu.corpus_bleu(output, references).score:.2f}")
