"""`python -m keras_transformer_cli ...` with the refilling program's rows set from `SLOTS_AB` (for `slots_ab.py`)."""
import os
import runpy
import sys

import keras_transformer.translation.translation_program as translation_program
import keras_transformer_runtime.compiled_translator as compiled_translator

compiled_translator.REFILL_SLOTS = translation_program.REFILL_SLOTS = int(os.environ["SLOTS_AB"])
sys.argv = ["keras_transformer_cli", *sys.argv[3:]]  # past "-m keras_transformer_cli"
runpy.run_module("keras_transformer_cli", run_name="__main__")
