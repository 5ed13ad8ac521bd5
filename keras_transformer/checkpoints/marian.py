"""Hugging Face Marian (OPUS-MT) checkpoints on this package's layers.

A `MarianMTModel` is the paper's Transformer with a few settings of its
own, each an option of `keras_transformer.models.transformer`: post-LN
with LayerNorm epsilon 1e-5, biases on every projection, swish in the
feed-forward, one token matrix for source, target and output
(`share_embeddings`, `tie_embeddings`) plus a `final_logits_bias`
(`output_bias`), sinusoids laid out in halves (`sinusoid_layout`), and a
decoder that starts from its padding token (`decoder_start_id`). Its ids
are permuted so that its specials sit where this package's are
(`keras_transformer_runtime.marian_tokenizer.marian_id_order`).

Reading a checkpoint needs neither torch nor transformers: `config.json`,
the weights of `model.safetensors` (read with `safetensors.numpy`) and the
SentencePiece models. A `pytorch_model.bin` needs torch to unpickle.
"""

import json
import os
import typing

import numpy as np

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import MARIAN_VOCABULARY_FILES
from keras_transformer_runtime.marian_tokenizer import MarianTokenizer
from keras_transformer_runtime.marian_tokenizer import read_json_object
from keras_transformer_runtime.special_tokens import PAD_ID

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"
# Hugging Face's LayerNorm epsilon in every Marian layer (torch's default).
LAYER_NORM_EPSILON = 1e-5
# Hugging Face's names of activations, as Keras names them (swish = silu = x * sigmoid(x);
# gelu is the exact one in both).
_ACTIVATIONS = {"swish": "swish", "silu": "silu", "relu": "relu", "gelu": "gelu"}
# (name in transformers, name here) of each projection of an attention.
_ATTENTION_PROJECTIONS = (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "attention_output"))


class MarianArchitecture(typing.NamedTuple):
    """What `config.json` says of the model, as `transformer()` arguments.

    Attributes:
        vocabulary_size, num_layers, num_decoder_layers, d_model, num_heads,
            ff_dim, max_length, activation, embedding_scale, dropout:
            `transformer()`'s arguments.
        pad_id, eos_id, decoder_start_id: Marian's ids of its padding, end
            and start tokens.
        share_embeddings: one token matrix for source and target (else
            each has its own, as a run exported from this package).
    """

    vocabulary_size: int
    num_layers: int
    num_decoder_layers: int
    d_model: int
    num_heads: int
    ff_dim: int
    max_length: int
    activation: str
    embedding_scale: object
    dropout: float
    pad_id: int
    eos_id: int
    decoder_start_id: int
    share_embeddings: bool = True

    def builder_arguments(self, decoder_start_id=PAD_ID):
        """The keyword arguments of `transformer()` for this architecture.

        Args:
            decoder_start_id: the start token in this package's ids
                (Marian's `decoder_start_id` through `marian_id_order`).
        """
        return dict(
            source_vocabulary_size=self.vocabulary_size, target_vocabulary_size=self.vocabulary_size,
            num_layers=self.num_layers, num_decoder_layers=self.num_decoder_layers, d_model=self.d_model,
            num_heads=self.num_heads, ff_dim=self.ff_dim, max_length=self.max_length, dropout=self.dropout,
            activation=self.activation, embedding_scale=self.embedding_scale, layer_norm_epsilon=LAYER_NORM_EPSILON,
            tie_embeddings=True, share_embeddings=self.share_embeddings, output_bias=True, sinusoid_layout="halves",
            decoder_start_id=decoder_start_id,
        )


def read_architecture(directory):
    """The `MarianArchitecture` of a Hugging Face Marian folder's `config.json`.

    Args:
        directory: the folder.

    Returns:
        A `MarianArchitecture`.

    Raises:
        UserInputError: `config.json` is missing or unreadable, describes
            another architecture (BART, mBART, `normalize_before`, ...), or a
            setting the layers cannot express; the message names the file
            and the setting.

    Example:

    >>> import json, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"model_type": "bart"}, f)
    >>> read_architecture(folder)
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: ...config.json: model_type 'bart' is not a Marian model ...
    """
    path = os.path.join(directory, CONFIG_FILE)
    config = read_json_object(path, "a Hugging Face model folder holds config.json.")
    if config.get("model_type") != "marian":
        raise UserInputError(
            f"{path}: model_type {config.get('model_type')!r} is not a Marian model (MarianMTModel, "
            "model_type 'marian'); only Marian checkpoints (OPUS-MT) are imported."
        )

    def setting(key, default=None):
        return config.get(key, default)

    def refuse(key, why):
        raise UserInputError(f"{path}: {key}={setting(key)!r}: {why}")

    for key in ("normalize_before", "add_final_layer_norm", "normalize_embedding", "add_bias_logits"):
        if setting(key):
            refuse(key, "the layers express Marian's post-LN model without extra norms or logits biases.")
    if setting("static_position_embeddings") is False:
        refuse("static_position_embeddings", "only sinusoidal positions are imported.")
    if not setting("tie_word_embeddings", True):
        refuse("tie_word_embeddings", "an output projection of its own is not imported yet.")
    activation = setting("activation_function", "gelu")
    if activation not in _ACTIVATIONS:
        refuse("activation_function", f"the feed-forward takes {sorted(_ACTIVATIONS)}.")
    for encoder_key, decoder_key in (("encoder_attention_heads", "decoder_attention_heads"),
                                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if setting(encoder_key) != setting(decoder_key):
            refuse(decoder_key, f"differs from {encoder_key}={setting(encoder_key)!r}; "
                                "encoder and decoder layers have one size here.")
    integers = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                "encoder_ffn_dim", "max_position_embeddings", "pad_token_id", "eos_token_id")
    for key in integers:
        if isinstance(setting(key), bool) or not isinstance(setting(key), int) or setting(key) < 0:
            refuse(key, "expected a non-negative integer.")
    if setting("d_model") % setting("encoder_attention_heads"):
        refuse("encoder_attention_heads", f"does not divide d_model={setting('d_model')}.")
    vocabulary_size = setting("vocab_size")
    if setting("decoder_vocab_size", vocabulary_size) != vocabulary_size:
        refuse("decoder_vocab_size", f"differs from vocab_size={vocabulary_size}; one vocabulary is imported.")
    if vocabulary_size < 4:
        refuse("vocab_size", "a vocabulary needs at least its 3 specials and one piece.")
    start = setting("decoder_start_token_id", setting("pad_token_id"))
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if not isinstance(setting(key, start), int) or not 0 <= setting(key, start) < vocabulary_size:
            refuse(key, f"outside the vocabulary of {vocabulary_size}.")
    return MarianArchitecture(
        vocabulary_size=vocabulary_size,
        num_layers=setting("encoder_layers"),
        num_decoder_layers=setting("decoder_layers"),
        d_model=setting("d_model"),
        num_heads=setting("encoder_attention_heads"),
        ff_dim=setting("encoder_ffn_dim"),
        max_length=setting("max_position_embeddings"),
        activation=_ACTIVATIONS[activation],
        embedding_scale="sqrt" if setting("scale_embedding", False) else None,
        dropout=float(setting("dropout", 0.1)),
        pad_id=setting("pad_token_id"),
        eos_id=setting("eos_token_id"),
        decoder_start_id=start,
        share_embeddings=bool(setting("share_encoder_decoder_embeddings", True)),
    )


def read_weights(directory):
    """`(tensors, path)`: a Marian folder's weights file's tensors by name (float32 NumPy arrays), and the file.

    `model.safetensors` is read with `safetensors.numpy` (no torch);
    a `pytorch_model.bin` alone needs torch.

    Raises:
        UserInputError: no weights file, or one that cannot be read
            (truncated, not a checkpoint).
    """
    safetensors_path = os.path.join(directory, SAFETENSORS_FILE)
    pytorch_path = os.path.join(directory, PYTORCH_FILE)
    if os.path.isfile(safetensors_path):
        path = safetensors_path
        from safetensors.numpy import load_file

        try:
            tensors = load_file(safetensors_path)
        except Exception as error:  # safetensors raises its own SafetensorError, and OSError
            raise UserInputError(f"{safetensors_path}: not a readable safetensors file ({error}).") from None
    elif os.path.isfile(pytorch_path):
        path = pytorch_path
        try:
            import torch
        except ImportError:
            raise UserInputError(f"{pytorch_path}: reading a pytorch_model.bin needs torch; install it, or "
                                 "save the model with safetensors.") from None
        try:
            state = torch.load(pytorch_path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises many kinds for a damaged pickle
            raise UserInputError(f"{pytorch_path}: not a readable PyTorch checkpoint ({error}).") from None
        tensors = {name: value.float().numpy() for name, value in state.items()}
    else:
        raise UserInputError(f"{directory}: holds neither {SAFETENSORS_FILE} nor {PYTORCH_FILE}.")
    return {_short_name(name): np.asarray(value, np.float32) for name, value in tensors.items()}, path


def _short_name(name):
    # MarianMTModel saves its MarianModel under "model."; a bare MarianModel does not.
    return name[len("model."):] if name.startswith("model.") else name


def _take(tensors, name, shape, weights_path):
    if name not in tensors:
        raise UserInputError(f"{weights_path}: lacks the tensor {name!r} that config.json's model needs.")
    value = tensors[name]
    if tuple(value.shape) != tuple(shape):
        raise UserInputError(f"{weights_path}: {name!r} has shape {tuple(value.shape)}, config.json's model "
                             f"needs {tuple(shape)}.")
    return value


def marian_weights(architecture, tensors, marian_ids, weights_path="the weights"):
    """The model's weights by variable path, from a Marian checkpoint's tensors.

    Args:
        architecture: a `MarianArchitecture`.
        tensors: the dict of `read_weights`.
        marian_ids: for each id of this package, the Marian id
            (`marian_id_order`): the rows of the embedding and the bias follow it.
        weights_path: the file the tensors came from, for messages.

    Returns:
        A dict from a variable's `path` in a `transformer()` model built
        with `architecture.builder_arguments()` to its NumPy value.

    Raises:
        UserInputError: a tensor is missing or of the wrong shape.
    """
    a = architecture
    bias = tensors.get("final_logits_bias", np.zeros((1, a.vocabulary_size), np.float32))
    bias = _take({"final_logits_bias": bias}, "final_logits_bias", (1, a.vocabulary_size), weights_path)
    if a.share_embeddings:
        names = {"shared": ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                            "lm_head.weight")}
    else:  # lm_head is tied to the decoder's matrix
        names = {"encoder": ("encoder.embed_tokens.weight",),
                 "decoder": ("decoder.embed_tokens.weight", "lm_head.weight")}
    weights = {}
    for stack, candidates in names.items():
        name = next((name for name in candidates if name in tensors), candidates[0])
        embeddings = _take(tensors, name, (a.vocabulary_size, a.d_model), weights_path)
        weights[f"{stack}_embedding/token_embedding/embeddings"] = embeddings[marian_ids]
    weights[f"{'shared' if a.share_embeddings else 'decoder'}_embedding/logits_bias"] = bias[0, marian_ids]

    def dense(ours, theirs, inputs, outputs):
        weights[f"{ours}/kernel"] = _take(tensors, f"{theirs}.weight", (outputs, inputs), weights_path).T
        weights[f"{ours}/bias"] = _take(tensors, f"{theirs}.bias", (outputs,), weights_path)

    def norm(ours, theirs):
        weights[f"{ours}/gamma"] = _take(tensors, f"{theirs}.weight", (a.d_model,), weights_path)
        weights[f"{ours}/beta"] = _take(tensors, f"{theirs}.bias", (a.d_model,), weights_path)

    def attention(ours, theirs):
        for their_name, our_name in _ATTENTION_PROJECTIONS:
            dense(f"{ours}/{our_name}", f"{theirs}.{their_name}", a.d_model, a.d_model)

    def feed_forward(ours, theirs):
        dense(f"{ours}/feed_forward/hidden", f"{theirs}.fc1", a.d_model, a.ff_dim)
        dense(f"{ours}/feed_forward/output", f"{theirs}.fc2", a.ff_dim, a.d_model)
        norm(f"{ours}/feed_forward_norm", f"{theirs}.final_layer_norm")

    for i in range(a.num_layers):
        ours, theirs = f"encoder_layer_{i}", f"encoder.layers.{i}"
        attention(f"{ours}/self_attention", f"{theirs}.self_attn")
        norm(f"{ours}/self_attention_norm", f"{theirs}.self_attn_layer_norm")
        feed_forward(ours, theirs)
    for i in range(a.num_decoder_layers):
        ours, theirs = f"decoder_layer_{i}", f"decoder.layers.{i}"
        attention(f"{ours}/self_attention", f"{theirs}.self_attn")
        norm(f"{ours}/self_attention_norm", f"{theirs}.self_attn_layer_norm")
        attention(f"{ours}/cross_attention", f"{theirs}.encoder_attn")
        norm(f"{ours}/cross_attention_norm", f"{theirs}.encoder_attn_layer_norm")
        feed_forward(ours, theirs)
    return weights


class MarianCheckpoint(typing.NamedTuple):
    """A Hugging Face Marian folder, read and checked.

    Attributes:
        directory: the folder.
        architecture: its `MarianArchitecture`.
        tokenizer: its `MarianTokenizer`.
        weights: the model's weights by variable path (`marian_weights`).
    """

    directory: str
    architecture: MarianArchitecture
    tokenizer: MarianTokenizer
    weights: dict


def read_marian(directory):
    """Reads and checks a Hugging Face Marian folder: config, tokenizer and weights.

    Args:
        directory: a `MarianMTModel` folder (`config.json`,
            `model.safetensors` or `pytorch_model.bin`, `source.spm`,
            `target.spm`, `vocab.json`, `tokenizer_config.json`).

    Returns:
        A `MarianCheckpoint`.

    Raises:
        UserInputError: a file is missing, damaged or disagrees with
            another (the message names the file and what is wrong).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise UserInputError(f"{directory}: not a folder; pass a Hugging Face Marian model folder.")
    architecture = read_architecture(directory)
    tokenizer = MarianTokenizer(directory)
    pieces = tokenizer.vocabulary_size()
    if pieces != architecture.vocabulary_size:
        raise UserInputError(f"{os.path.join(directory, 'vocab.json')}: {pieces} pieces, but config.json's "
                             f"vocab_size is {architecture.vocabulary_size}.")
    for key, piece in (("pad_id", "pad_token"), ("eos_id", "eos_token")):
        table_id = int(tokenizer.marian_ids[tokenizer.token_to_id(tokenizer.specials[piece])])
        if table_id != getattr(architecture, key):
            raise UserInputError(
                f"{os.path.join(directory, 'vocab.json')}: {tokenizer.specials[piece]!r} has id {table_id}, but "
                f"config.json's {key.replace('_id', '_token_id')} is {getattr(architecture, key)}."
            )
    tensors, weights_path = read_weights(directory)
    weights = marian_weights(architecture, tensors, tokenizer.marian_ids, weights_path)
    return MarianCheckpoint(directory, architecture, tokenizer, weights)


def _start_id(checkpoint):
    """The decoder's start token in this package's ids."""
    return int(np.argsort(checkpoint.tokenizer.marian_ids)[checkpoint.architecture.decoder_start_id])


def run_config(checkpoint):
    """The `config.json` of an imported run: the sizes `train --from` reads, and Marian's options.

    The sizes are `TrainConfig`'s fields (`preset` "base" names the
    presets' training defaults, which a fine-tuning run replaces with its
    own); the rest of `transformer()`'s arguments go to `model_options`.
    """
    arguments = checkpoint.architecture.builder_arguments(_start_id(checkpoint))
    core = {"num_layers", "d_model", "num_heads", "ff_dim", "max_length", "dropout", "tie_embeddings"}
    return {
        "preset": "base", "vocabulary_size": arguments["target_vocabulary_size"],
        **{key: arguments[key] for key in core},
        "model_options": {key: value for key, value in arguments.items()
                          if key not in core and not key.endswith("vocabulary_size")},
    }


def build_model(checkpoint):
    """The functional `transformer()` model of a `MarianCheckpoint`, with its weights.

    Returns:
        A `keras.Model`, as `keras_transformer.models.transformer` builds it.
    """
    from keras_transformer import models

    model = models.transformer(**checkpoint.architecture.builder_arguments(_start_id(checkpoint)), name="marian")
    variables = {variable.path: variable for variable in model.weights}
    missing = sorted(set(variables) - set(checkpoint.weights))
    if missing:  # a layer this module does not map yet: a bug here, not the user's
        raise RuntimeError(f"The Marian converter gives no value for {missing}.")
    for path, variable in variables.items():
        variable.assign(checkpoint.weights[path].astype(variable.dtype))
    return model


def load_marian(directory):
    """A Hugging Face Marian (OPUS-MT) model as a Keras model and its tokenizer.

    The model is a `keras_transformer.models.transformer()` model (the
    package's layers) with Marian's settings, so it trains with `fit`,
    decodes with `Translator` and saves as `.keras`. Where the network is
    available, download a hub model first (`huggingface_hub.snapshot_download`
    or `keras-transformer import Helsinki-NLP/opus-mt-es-en`).

    Args:
        directory: a `MarianMTModel` folder.

    Returns:
        `(model, tokenizer)`: the `keras.Model` and its `MarianTokenizer`.

    Raises:
        UserInputError: see `read_marian`.

    Example:

    >>> import keras_transformer as kt  # doctest: +SKIP
    >>> model, tokenizer = kt.checkpoints.load_marian("opus-mt-es-en")  # doctest: +SKIP
    >>> kt.translator.Translator(model, tokenizer)("Hola, mundo.")  # doctest: +SKIP
    'Hello, world.'
    """
    checkpoint = read_marian(directory)
    return build_model(checkpoint), checkpoint.tokenizer


def copy_vocabulary_files(source, destination):
    """Copies a Marian tokenizer's files (`MARIAN_VOCABULARY_FILES`, `tokenizer_config.json`) between folders."""
    import shutil

    from keras_transformer_runtime.marian_tokenizer import TOKENIZER_CONFIG_FILE

    for name in (*MARIAN_VOCABULARY_FILES, TOKENIZER_CONFIG_FILE):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(destination, name))


# What `import_marian` fetches of a hub model: the files a Marian folder needs, no others.
_HUB_FILES = [CONFIG_FILE, "generation_config.json", SAFETENSORS_FILE, PYTORCH_FILE, *MARIAN_VOCABULARY_FILES,
              "tokenizer_config.json"]
# The Hugging Face config, kept beside the imported model (the run's own config.json is a training config).
MARIAN_CONFIG_FILE = "marian_config.json"
IMPORTED_FILE = "imported.json"


def _is_hub_id(source):
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "/")) and " " not in source


def fetch_marian(source):
    """A local folder for `source`: the folder itself, or a hub id (`Helsinki-NLP/opus-mt-es-en`) downloaded.

    Args:
        source: a folder, or a Hugging Face hub id, fetched with
            `huggingface_hub.snapshot_download` (its cache) where the network is available.

    Returns:
        The folder's path.

    Raises:
        UserInputError: neither a folder nor a hub id that can be fetched.

    Example:

    >>> fetch_marian("no such folder")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: no such folder: no such folder, and not a hub id ...
    """
    source = os.fspath(source)
    if os.path.isdir(source):
        return source
    if not _is_hub_id(source) or os.path.exists(source):
        raise UserInputError(f"{source}: no such folder, and not a hub id (ORGANIZATION/NAME, e.g. "
                             "Helsinki-NLP/opus-mt-es-en).")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserInputError(f"{source}: fetching a hub model needs huggingface_hub (pip install huggingface_hub); "
                             "or pass a local folder.") from None
    try:
        return snapshot_download(repo_id=source, allow_patterns=_HUB_FILES)
    except Exception as error:  # offline, unknown id, no permission: huggingface_hub raises many kinds
        raise UserInputError(f"{source}: could not fetch it from the Hugging Face hub "
                             f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                             "on a machine without the network, pass a local folder.") from None


def import_marian(source, output, overwrite=False):
    """Writes a run folder from a Hugging Face Marian model, which every verb then takes as a trained run.

    The folder holds `model.keras` (a `transformer()` model with Marian's
    settings and weights), Marian's tokenizer files (`source.spm`,
    `target.spm`, `vocab.json`, `tokenizer_config.json`), its Hugging Face
    config (`marian_config.json`), the run's own `config.json` (`run_config`:
    what `train --from` reads) and `imported.json` (where it came from). It is written beside `output` and moved there whole, so a
    failure leaves nothing in `output`.

    Args:
        source: a `MarianMTModel` folder, or a hub id (`fetch_marian`).
        output: the run folder to write.
        overwrite: replace a run folder that exists; otherwise an
            existing, non-empty `output` is refused.

    Returns:
        The `MarianCheckpoint` that was imported.

    Raises:
        UserInputError: see `read_marian`; `output` exists and is not empty.

    Example:

    >>> import_marian("opus-mt-es-en", "runs/opus-mt-es-en")  # doctest: +SKIP
    """
    import shutil

    output = os.fspath(output)
    if os.path.isdir(output) and os.listdir(output) and not overwrite:
        raise UserInputError(f"--output {output}: exists and is not empty; pass --overwrite to replace it.")
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserInputError(f"--output {output}: is a file, not a folder.")
    checkpoint = read_marian(fetch_marian(source))
    model = build_model(checkpoint)
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(os.path.abspath(output))}.importing-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        os.makedirs(staging)
        model.save(os.path.join(staging, "model.keras"))
        copy_vocabulary_files(checkpoint.directory, staging)
        shutil.copyfile(os.path.join(checkpoint.directory, CONFIG_FILE), os.path.join(staging, MARIAN_CONFIG_FILE))
        with open(os.path.join(staging, CONFIG_FILE), "w") as f:  # the run's own: what `train --from` reads
            json.dump(run_config(checkpoint), f, indent=2)
        with open(os.path.join(staging, IMPORTED_FILE), "w") as f:
            json.dump({"format": "marian", "source": os.fspath(source), "parameters": int(model.count_params())},
                      f, indent=2)
        if os.path.isdir(output):
            shutil.rmtree(output)
        os.replace(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return checkpoint
