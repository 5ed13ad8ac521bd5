"""Translating with a trained run: the Keras `Translator`, BLEU, and exports.

`Translator.from_directory(folder)` decodes with the run's model (greedy, beam,
n-best, alignments); `evaluate_pairs` scores it with sacrebleu. The modules
behind them: `translator`, `evaluation`, `translation_program` (the
compiled engine's program, which `keras-transformer translate` runs
without Keras), `export` (a SavedModel, strings in and out) and
`ctranslate2_model` (a CTranslate2 model, and its translator).

Example:

>>> import keras_transformer as kt
>>> kt.translation.Translator.__name__
'Translator'
"""

from keras_transformer.translation.evaluation import evaluate_pairs
from keras_transformer.translation.translator import Translator
