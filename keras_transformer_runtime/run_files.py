"""The names of the files a training run leaves that translating reads.

`keras_transformer.run_folder` describes the whole folder; these two are
here so that code which runs without Keras names them the same way.
"""

MODEL_FILE = "model.keras"
VOCABULARY_FILE = "vocabulary.spm"
