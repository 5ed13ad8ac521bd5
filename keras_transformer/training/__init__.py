"""Training: the paper's recipe (schedule, masked loss) and the job behind `keras-transformer train`.

What a Keras user compiles a model with: `TransformerSchedule`,
`MaskedSparseCrossentropy`, `MaskedAccuracy`. The whole job, from a corpus
to a run folder: `train_translator` (or `build_translator` for the model
alone) with a `TrainConfig`. The modules behind them, one concern each:
`train_config` (settings and presets), `train_input` (corpus, vocabulary,
batches), `run_folder` (the output folder, resuming, backups),
`model_selection` (dev BLEU, the kept weights), `fine_tuning`,
`distribute` (devices and processes), `training_speed`, `compile_ahead`,
`learning_curve`, `non_finite_loss`, `ablation` (variants x seeds).

Example:

>>> import keras_transformer as kt
>>> schedule = kt.training.TransformerSchedule(d_model=512, warmup_steps=4000)
>>> round(float(schedule(3999)), 6)
0.000699
"""

from keras_transformer.training.masked_loss import MaskedAccuracy
from keras_transformer.training.masked_loss import MaskedSparseCrossentropy
from keras_transformer.training.schedule import TransformerSchedule
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import build_translator
from keras_transformer.training.trainer import train_translator
