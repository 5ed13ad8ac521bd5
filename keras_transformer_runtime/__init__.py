"""Translating with a trained run without importing Keras.

What `keras-transformer translate` needs from the second call on, kept
apart from `keras_transformer` (whose import loads Keras and its backend,
seconds of a call: docs/translating.md, "Where the time goes"): the special
token ids, the SentencePiece tokenizer, the
translators' text front end, and the cache of compiled decoding programs
that JAX runs (`compiled_translator`). `keras_transformer` builds on these;
nothing here imports Keras.
"""
