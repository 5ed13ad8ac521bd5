"""Ad hoc: `benchmarks.decoding_step_profile` with the engine's growing caches, on a model quantized or not.

    XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true KERAS_BACKEND=jax PYTHONPATH=. \
        python benchmarks/results/cpu-xeon-amx/step-profile/engine_caches_step_profile.py MODE [profile's arguments]

The profile's greedy loop keeps its self-attention caches at the model's full
`max_length` (512 at opus-mt's shape); the engine's program starts them at 32
positions and doubles them (`search_tensors(grow_caches=True)`), as here.
MODE: `int8` loads the model as `translate --quantize int8` does; `none` as it is.
"""
import functools
import sys

from benchmarks import decoding_step_profile
from keras_transformer.decoding import sampler
from keras_transformer.translation.translator import Translator

mode, arguments = sys.argv[1], sys.argv[2:]
sampler.search_tensors = functools.partial(sampler.search_tensors, grow_caches=True)
if mode != "none":
    Translator.from_directory = functools.partial(Translator.from_directory.__func__, Translator, quantize=mode)
decoding_step_profile.main(arguments)
