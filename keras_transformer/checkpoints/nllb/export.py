"""An NLLB-200 or M2M-100 run (imported, perhaps fine-tuned since) as a Hugging Face folder: `export --format nllb`.

The folder loads with `M2M100ForConditionalGeneration.from_pretrained`
and `AutoTokenizer.from_pretrained` and gives the run's logits: the
import's mapping run backwards (ids back in the model's order, kernels
transposed to `Linear`'s `(outputs, inputs)`), with the run's own
`nllb_config.json` as `config.json` and its tokenizer's files (NLLB's or M2M-100's).
"""

import json
import os
import shutil

import numpy as np

from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import GENERATION_CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import SAFETENSORS_FILE
from keras_transformer.checkpoints.layer_weights import layer_tensor_names
from keras_transformer.checkpoints.nllb.config import read_architecture
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.m2m100_tokenizer import m2m100_tokenizer_files
from keras_transformer_runtime.run_files import MODEL_FILE
from keras_transformer_runtime.run_tokenizer import NLLB_CONFIG_FILE
from keras_transformer_runtime.run_tokenizer import is_nllb_run
from keras_transformer_runtime.run_tokenizer import load_run_tokenizer


def export_nllb(run_directory, out, force=False):
    """Writes an NLLB-200 or M2M-100 run as a Hugging Face folder that transformers loads with the run's logits.

    Args:
        run_directory: a run imported from NLLB-200 or M2M-100 (`import_nllb`), perhaps fine-tuned since.
        out: the folder to write.
        force: replace `out` if it holds files.

    Returns:
        The `config.json` written, as a dict.

    Raises:
        UserInputError: the run is not an NLLB-200 or M2M-100 run, or `out` holds files and `force` is False.

    Example:

    >>> export_nllb("runs/nllb-600m", "nllb-exported")  # doctest: +SKIP
    """
    from safetensors.numpy import save_file

    from keras_transformer import model_file

    if not is_nllb_run(run_directory):
        raise UserInputError(f"export --format nllb: {run_directory} is not a run imported from NLLB-200 or M2M-100 "
                             "(no tokenizer.json, nor sentencepiece.bpe.model and vocab.json, beside "
                             "nllb_config.json); export --format marian writes other runs.")
    if os.path.isdir(out) and os.listdir(out) and not force:
        raise UserInputError(f"--out {out}: holds files; pass --force to replace them.")
    architecture = read_architecture(run_directory, NLLB_CONFIG_FILE)
    model = model_file.load_model(os.path.join(run_directory, MODEL_FILE), compile=False)
    values = {variable.path: np.asarray(variable.numpy(), np.float32) for variable in model.weights}
    model_ids = load_run_tokenizer(run_directory).model_ids
    names = {path: name for path, (name, _) in layer_tensor_names(architecture).items()}
    names.update({f"{stack}_final_norm/{ours}": f"{stack}.layer_norm.{theirs}"
                  for stack in ("encoder", "decoder") for ours, theirs in (("gamma", "weight"), ("beta", "bias"))})
    tensors = {f"model.{name}": np.ascontiguousarray(values[path].T if path.endswith("/kernel") else values[path])
               for path, name in names.items()}
    embeddings = np.empty_like(values["shared_embedding/token_embedding/embeddings"])
    embeddings[model_ids] = values["shared_embedding/token_embedding/embeddings"]
    tensors["model.shared.weight"] = embeddings
    if force and os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, SAFETENSORS_FILE), metadata={"format": "pt"})
    shutil.copyfile(os.path.join(run_directory, NLLB_CONFIG_FILE), os.path.join(out, CONFIG_FILE))
    for name in (*m2m100_tokenizer_files(run_directory), GENERATION_CONFIG_FILE):
        if os.path.isfile(os.path.join(run_directory, name)):
            shutil.copyfile(os.path.join(run_directory, name), os.path.join(out, name))
    with open(os.path.join(out, CONFIG_FILE), encoding="utf-8") as f:
        return json.load(f)

