"""The names of the files a training run leaves that translating reads.

`keras_transformer.training.run_folder` describes the whole folder; these are here
so that code which runs without Keras names them the same way. A run
trained here holds one SentencePiece vocabulary (`vocabulary.spm`); a run
imported from a Hugging Face Marian model holds Marian's two SentencePiece
models and its id table instead
(`MARIAN_VOCABULARY_FILES`).
"""

MODEL_FILE = "model.keras"
VOCABULARY_FILE = "vocabulary.spm"
# A Marian run's tokenizer: Hugging Face's names (`keras_transformer_runtime.marian_tokenizer`).
SOURCE_VOCABULARY_FILE = "source.spm"
TARGET_VOCABULARY_FILE = "target.spm"
ID_TABLE_FILE = "vocab.json"
# A Marian model with a target vocabulary of its own (`separate_vocabs`) numbers the target pieces here.
TARGET_ID_TABLE_FILE = "target_vocab.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
MARIAN_VOCABULARY_FILES = (SOURCE_VOCABULARY_FILE, TARGET_VOCABULARY_FILE, ID_TABLE_FILE)
