"""A run as a Hugging Face Marian folder: `keras-transformer export --format marian`.

The folder loads with `MarianMTModel.from_pretrained` and
`MarianTokenizer.from_pretrained`. A run trained here lays its sinusoids
out interleaved, Marian in halves; the two differ by a permutation of the
model's features, so every weight that reads or writes the model's width
is permuted the same way (`width_order`), which leaves every logit as it
was: LayerNorm and the residual sums do not care about the order of
features, and the attention heads and the feed-forward's hidden units are
not permuted. The vocabulary keeps this package's ids (`vocab.json` maps
each piece to its SentencePiece id; both `.spm` files are the run's
`vocabulary.spm`), and the config names its own specials: `<pad>` 0,
`</s>` 3, and decoding starts from `<s>` (2). A run whose target has a
table of its own (`separate_vocabs`) keeps it: `target_vocab.json` beside
`vocab.json`, `decoder_vocab_size`, and the encoder's and decoder's own
matrices (`share_encoder_decoder_embeddings` false); the specials have
the same ids in both tables, so transformers' `skip_special_tokens` drops
the decoder's `<pad>` too.

`MarianTokenizer` always appends `</s>` to a source, which a run trained
here never saw there: call it with `add_special_tokens=False` to give the
model what `keras-transformer translate` gives it (the logits are then
this package's; tests/test_marian_export.py).
"""

import json
import os
import shutil

import numpy as np

from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import SAFETENSORS_FILE
from keras_transformer.checkpoints.marian.config import LAYER_NORM_EPSILON
from keras_transformer.model_parts import SHARED_EMBEDDING
from keras_transformer.model_parts import transformer_parts
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.run_files import ID_TABLE_FILE
from keras_transformer_runtime.run_files import SOURCE_VOCABULARY_FILE
from keras_transformer_runtime.run_files import TARGET_ID_TABLE_FILE
from keras_transformer_runtime.run_files import TARGET_VOCABULARY_FILE
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID

_ACTIVATIONS = ("relu", "swish", "silu", "gelu")


def width_order(d_model, sinusoid_layout):
    """The features of the model in Marian's order: entry `j` is this model's feature at Marian's `j`.

    Example:

    >>> width_order(6, "interleaved").tolist(), width_order(6, "halves").tolist()
    ([0, 2, 4, 1, 3, 5], [0, 1, 2, 3, 4, 5])
    """
    if sinusoid_layout == "halves":
        return np.arange(d_model)
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def check_expressible(model):
    """Refuses a model Marian cannot express, in one line naming the setting.

    Raises:
        UserInputError: pre-LN, learned or concatenated positions, an
            embedding scale other than sqrt(d_model) or none, another
            LayerNorm epsilon, no biases, a fused QKV kernel, another logit
            scale or activation, or a quantized model.
    """
    parts = transformer_parts(model)
    embedding = parts.decoder_embedding.get_config()
    layer = parts.encoder_layers[0].get_config()

    def refuse(setting, why):
        raise UserInputError(f"export --format marian: {setting}: {why}")

    if embedding["positions"] != "sinusoidal" or embedding["merge"] != "add":
        refuse(f"positions={embedding['positions']!r}, merge={embedding['merge']!r}",
               "Marian adds sinusoidal positions.")
    if embedding["scale"] not in ("sqrt", None):
        refuse(f"embedding_scale={embedding['scale']!r}", "Marian scales embeddings by sqrt(d_model) or not at all.")
    if parts.decoder_embedding.token_embedding.quantization_mode is not None:
        refuse("a quantized model", "export the float model.")
    for stack in (parts.encoder_layers, parts.decoder_layers):
        for config in (one.get_config() for one in stack):
            if config.get("norm_first"):
                refuse("norm_first=True (pre-LN)", "Marian's layers are post-LN.")
            if abs(config.get("layer_norm_epsilon", LAYER_NORM_EPSILON) - LAYER_NORM_EPSILON) > 1e-12:
                refuse(f"layer_norm_epsilon={config.get('layer_norm_epsilon')}", "Marian's LayerNorms use 1e-5.")
            if not config.get("use_bias", True) or config.get("fused_qkv"):
                refuse("use_bias=False or fused_qkv=True", "Marian has separate projections with biases.")
            if config.get("logit_scale", "sqrt") != "sqrt":
                refuse(f"logit_scale={config.get('logit_scale')!r}", "Marian divides attention logits by sqrt(key_dim).")
            if config.get("activation") not in _ACTIVATIONS:
                refuse(f"activation={config.get('activation')!r}", f"Marian takes {list(_ACTIVATIONS)}.")
    return parts, embedding, layer


def marian_config(model):
    """The Hugging Face `config.json` (a dict) of a `transformer()` model, checked by `check_expressible`."""
    parts, embedding, layer = check_expressible(model)
    shared = parts.encoder_embedding is parts.decoder_embedding
    tied = parts.output_projection is None
    start = parts.decoder_start_id
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian",
        "vocab_size": parts.encoder_embedding.vocabulary_size,
        "decoder_vocab_size": parts.decoder_embedding.vocabulary_size,
        "d_model": layer["d_model"], "encoder_layers": len(parts.encoder_layers),
        "decoder_layers": len(parts.decoder_layers),
        "encoder_attention_heads": layer["num_heads"], "decoder_attention_heads": layer["num_heads"],
        "encoder_ffn_dim": layer["ff_dim"], "decoder_ffn_dim": layer["ff_dim"],
        "max_position_embeddings": embedding["max_length"], "activation_function": layer["activation"],
        "scale_embedding": embedding["scale"] == "sqrt", "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": tied, "pad_token_id": PAD_ID, "eos_token_id": END_ID,
        "forced_eos_token_id": END_ID, "decoder_start_token_id": start, "is_encoder_decoder": True,
        "dropout": layer["dropout"], "attention_dropout": 0.0, "activation_dropout": 0.0,
    }


def marian_tensors(model):
    """The model's weights under Hugging Face Marian's names, as float32 NumPy arrays (width permuted)."""
    import keras

    parts = transformer_parts(model)
    order = width_order(parts.decoder_embedding.d_model, parts.decoder_embedding.sinusoid_layout)
    values = {variable.path: keras.ops.convert_to_numpy(variable).astype(np.float32) for variable in model.weights}
    tensors = {}

    def linear(theirs, ours, reads_width, writes_width):
        kernel, bias = values[f"{ours}/kernel"], values[f"{ours}/bias"]
        kernel = kernel[order] if reads_width else kernel
        kernel, bias = (kernel[:, order], bias[order]) if writes_width else (kernel, bias)
        tensors[f"{theirs}.weight"], tensors[f"{theirs}.bias"] = kernel.T, bias

    def norm(theirs, ours):
        tensors[f"{theirs}.weight"] = values[f"{ours}/gamma"][order]
        tensors[f"{theirs}.bias"] = values[f"{ours}/beta"][order]

    def layer(theirs, ours, attentions):
        for their_attention, our_attention, their_norm, our_norm in attentions:
            for their_name, our_name in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
                linear(f"{theirs}.{their_attention}.{their_name}", f"{ours}/{our_attention}/{our_name}", True, False)
            linear(f"{theirs}.{their_attention}.out_proj", f"{ours}/{our_attention}/attention_output", False, True)
            norm(f"{theirs}.{their_norm}", f"{ours}/{our_norm}")
        linear(f"{theirs}.fc1", f"{ours}/feed_forward/hidden", True, False)
        linear(f"{theirs}.fc2", f"{ours}/feed_forward/output", False, True)
        norm(f"{theirs}.final_layer_norm", f"{ours}/feed_forward_norm")

    for i, encoder_layer in enumerate(parts.encoder_layers):
        layer(f"model.encoder.layers.{i}", encoder_layer.name,
              [("self_attn", "self_attention", "self_attn_layer_norm", "self_attention_norm")])
    for i, decoder_layer in enumerate(parts.decoder_layers):
        layer(f"model.decoder.layers.{i}", decoder_layer.name,
              [("self_attn", "self_attention", "self_attn_layer_norm", "self_attention_norm"),
               ("encoder_attn", "cross_attention", "encoder_attn_layer_norm", "cross_attention_norm")])
    for embedding, names in ((parts.encoder_embedding, ["model.encoder.embed_tokens.weight"]),
                             (parts.decoder_embedding, ["model.decoder.embed_tokens.weight"])):
        matrix = values[f"{embedding.name}/token_embedding/embeddings"][:, order]
        for name in (["model.shared.weight"] if embedding.name == SHARED_EMBEDDING else names):
            tensors[name] = matrix
    vocabulary = parts.decoder_embedding.vocabulary_size
    if parts.output_projection is None:
        bias = values.get(f"{parts.decoder_embedding.name}/logits_bias", np.zeros(vocabulary, np.float32))
    else:
        kernel = values[f"{parts.output_projection.name}/kernel"][order]
        tensors["lm_head.weight"], bias = kernel.T, values[f"{parts.output_projection.name}/bias"]
    tensors["final_logits_bias"] = bias[None, :]
    return {name: np.ascontiguousarray(value) for name, value in tensors.items()}


def export_marian(run_directory, out, force=False):
    """Writes a run as a Hugging Face Marian folder that `MarianMTModel` and `MarianTokenizer` load.

    Args:
        run_directory: a run folder (trained here, or imported from Marian).
        out: the folder to write; an existing non-empty one needs `force`.
        force: replace `out`.

    Raises:
        UserInputError: a model Marian cannot express (`check_expressible`), or `out` not empty.

    Example:

    >>> export_marian("runs/es-en", "exported/es-en-marian")  # doctest: +SKIP
    """
    from safetensors.numpy import save_file

    from keras_transformer import model_file
    from keras_transformer_runtime.run_files import MODEL_FILE
    from keras_transformer_runtime.run_files import VOCABULARY_FILE
    from keras_transformer_runtime.run_tokenizer import is_marian_run
    from keras_transformer_runtime.run_tokenizer import load_run_tokenizer

    if os.path.isdir(out) and os.listdir(out) and not force:
        raise UserInputError(f"--out {out!r} exists and is not empty: choose a new folder, or pass --force.")
    model = model_file.load_model(os.path.join(run_directory, MODEL_FILE), compile=False)
    config = marian_config(model)
    tensors = marian_tensors(model)
    tokenizer = load_run_tokenizer(run_directory)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    save_file(tensors, os.path.join(out, SAFETENSORS_FILE), metadata={"format": "pt"})
    with open(os.path.join(out, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2)
    forbidden = sorted({PAD_ID, config["decoder_start_token_id"]})
    generation = {"bad_words_ids": [[i] for i in forbidden], "decoder_start_token_id": config["decoder_start_token_id"],
                  "eos_token_id": END_ID, "forced_eos_token_id": END_ID, "pad_token_id": PAD_ID, "num_beams": 4,
                  "max_length": config["max_position_embeddings"], "renormalize_logits": True}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2)
    if is_marian_run(run_directory):
        from keras_transformer.checkpoints.marian.run_import import copy_vocabulary_files

        copy_vocabulary_files(run_directory, out)
    else:
        for name in (SOURCE_VOCABULARY_FILE, TARGET_VOCABULARY_FILE):
            shutil.copyfile(os.path.join(run_directory, VOCABULARY_FILE), os.path.join(out, name))
        with open(os.path.join(out, TOKENIZER_CONFIG_FILE), "w") as f:
            json.dump({"tokenizer_class": "MarianTokenizer", "eos_token": "</s>", "unk_token": "<unk>",
                       "pad_token": "<pad>", "model_max_length": config["max_position_embeddings"],
                       "separate_vocabs": False}, f, indent=2)
    # This package's ids (an imported run's are Marian's permuted): vocab.json over a copied one, and
    # target_vocab.json where the target has a table of its own (its specials keep the source's ids).
    tables = {ID_TABLE_FILE: tokenizer.get_vocabulary()}
    if getattr(tokenizer, "separate_vocabularies", False):
        tables = {ID_TABLE_FILE: tokenizer.get_source_vocabulary(), TARGET_ID_TABLE_FILE: tokenizer.get_vocabulary()}
    for name, pieces in tables.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump({piece: i for i, piece in enumerate(pieces)}, f, ensure_ascii=False, indent=2)
    _renumber_added_tokens(os.path.join(out, TOKENIZER_CONFIG_FILE), tables[ID_TABLE_FILE])
    return config


def _renumber_added_tokens(path, pieces):
    """Gives the specials of a copied `tokenizer_config.json` (`added_tokens_decoder`) their ids in `pieces`.

    transformers 5 saves each special with its id, which it then trusts over
    `vocab.json`: a copied file would keep Marian's ids (`</s>` 0) beside
    this package's table (`</s>` 3).
    """
    if not os.path.isfile(path):  # a Marian folder may come without one
        return
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    added = config.get("added_tokens_decoder")
    if not isinstance(added, dict):
        return
    ids = {piece: i for i, piece in enumerate(pieces)}
    config["added_tokens_decoder"] = {str(ids[token["content"]]): token for token in added.values()
                                      if isinstance(token, dict) and token.get("content") in ids}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
