"""Ad hoc: how many of the 605 test translations the refilling program changes, and BLEU, in one process.

    PYTHONPATH=. KERAS_BACKEND=jax python benchmarks/results/cpu-xeon-amx/refill/refill_differences.py \
        /tmp/s7/es-en int8

The test split in one greedy call, in queues to the refilling program (the engine's default) and in
batches of 8 to the batch program (`queue_size = None`), the same weights in one process.
"""
import sys

import sacrebleu

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache

model, quantize = sys.argv[1], (None if sys.argv[2] == "none" else sys.argv[2])
pairs = load_bible_pairs("test")
sources, references = [pair.source for pair in pairs], [[pair.target for pair in pairs]]
translator = load_compiled_translator(model, ProgramCache(), beam_width=1, write=write_program_in_a_child,
                                      quantize=quantize)
queued = translator(sources)
queue_size, translator.queue_size = translator.queue_size, None
batches = translator(sources)
print(f"queue size {queue_size}: {sum(a != b for a, b in zip(queued, batches))} of {len(sources)} differ; "
      f"BLEU queues {sacrebleu.corpus_bleu(queued, references).score:.2f}, "
      f"batches {sacrebleu.corpus_bleu(batches, references).score:.2f}")
