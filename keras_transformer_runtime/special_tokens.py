"""Ids of the special tokens, in a module free of TensorFlow.

Every vocabulary the package trains reserves these ids; the model builders
treat `PAD_ID` as padding. Decoding code imports them from here so that it
runs on JAX or torch without TensorFlow installed.
"""

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
