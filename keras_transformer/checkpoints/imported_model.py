"""What every imported Hugging Face family shares once its config is read: the config's keys, the model, the run's config.

Marian and NLLB-200 read their own `config.json` settings; the keys that
change nothing (where the model came from, training-only regularization,
generation settings) and the base config's keys that must keep their
defaults are the same for both, and so are building the `transformer()`
model from the mapped weights and the run's `config.json` (`train --from`).
"""

from keras_transformer.initial_values import initial_values_from
from keras_transformer_runtime.errors import UserInputError

# Keys that change nothing of the model whatever their value: where it came from,
# what transformers returns, training-only regularization (a fine-tuning run has
# its own), and the decoding's defaults, which are generation settings.
NO_EFFECT_KEYS = frozenset({
    # where it came from, and what transformers' forward returns
    "transformers_version", "architectures", "_name_or_path", "name_or_path", "dtype", "torch_dtype",
    "output_hidden_states", "output_attentions", "return_dict", "torchscript", "use_bfloat16", "use_cache",
    "is_encoder_decoder", "id2label", "label2id", "_num_labels", "num_labels", "problem_type",
    "finetuning_task", "tokenizer_class", "prefix", "task_specific_params", "tf_legacy_loss",
    "chunk_size_feed_forward", "num_hidden_layers", "gradient_checkpointing", "_attn_implementation_autoset",
    # training only
    "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop", "init_std",
    "classif_dropout", "classifier_dropout",
    # generation settings (generation_config.json holds them too)
    "bos_token_id", "sep_token_id", "forced_bos_token_id", "forced_eos_token_id", "max_length", "min_length",
    "num_beams", "num_beam_groups", "num_return_sequences", "length_penalty", "early_stopping",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "do_sample", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "diversity_penalty", "output_scores", "return_dict_in_generate",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "renormalize_logits",
})
# Keys of transformers' base config that would change the model: refused unless at these defaults.
DEFAULT_ONLY_KEYS = {"is_decoder": False, "add_cross_attention": False, "cross_attention_hidden_size": None,
                     "tie_encoder_decoder": False, "pruned_heads": {}}
# What both families' layers take in their feed-forward, as Keras names them (swish = silu).
ACTIVATIONS = {"swish": "swish", "silu": "silu", "relu": "relu", "gelu": "gelu"}


def check_config(config, path, model_keys, no_effect_keys, family):
    """Refuses, in one line naming `path` and the key, a `config.json` the layers cannot express as it says.

    Every key must be read (`model_keys`), change nothing (`no_effect_keys`)
    or keep its default (`DEFAULT_ONLY_KEYS`); the layer sizes must be
    non-negative ints, one size for encoder and decoder layers, and the
    heads must divide `d_model`; the activation one of `ACTIVATIONS`.

    Args:
        config: the parsed `config.json`.
        path: the file, for messages.
        model_keys, no_effect_keys: the family's keys.
        family: its name in messages ("Marian's model").

    Raises:
        UserInputError: the first setting refused.

    Example:

    >>> check_config({"moe_experts": 4}, "config.json", set(), NO_EFFECT_KEYS, "this model")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: config.json: moe_experts=4: a setting this importer does not \
know; refused rather than ignored.
    """
    def refuse(key, why):
        raise UserInputError(f"{path}: {key}={config.get(key)!r}: {why}")

    for key in config:
        if key in DEFAULT_ONLY_KEYS and config[key] not in (DEFAULT_ONLY_KEYS[key], None):
            refuse(key, f"the layers express {family} only with {key}={DEFAULT_ONLY_KEYS[key]!r}.")
        if key not in model_keys and key not in no_effect_keys and key not in DEFAULT_ONLY_KEYS:
            refuse(key, "a setting this importer does not know; refused rather than ignored.")
    if not config.get("tie_word_embeddings", True):
        refuse("tie_word_embeddings", "an output projection of its own is not imported yet.")
    for encoder_key, decoder_key in (("encoder_attention_heads", "decoder_attention_heads"),
                                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(encoder_key) != config.get(decoder_key):
            refuse(decoder_key, f"differs from {encoder_key}={config.get(encoder_key)!r}; "
                                "encoder and decoder layers have one size here.")
    for key in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                "encoder_ffn_dim", "max_position_embeddings", "pad_token_id", "eos_token_id"):
        if isinstance(config.get(key), bool) or not isinstance(config.get(key), int) or config.get(key) < 0:
            refuse(key, "expected a non-negative integer.")
    if config["d_model"] % config["encoder_attention_heads"]:
        refuse("encoder_attention_heads", f"does not divide d_model={config['d_model']}.")


def checked_activation(config, path, default):
    """The feed-forward's activation as Keras names it (`ACTIVATIONS`), or a `UserInputError` naming `path`."""
    activation = config.get("activation_function", default)
    if activation not in ACTIVATIONS:
        raise UserInputError(f"{path}: activation_function={activation!r}: the feed-forward takes "
                             f"{sorted(ACTIVATIONS)}.")
    return ACTIVATIONS[activation]


def built_model(arguments, weights, name, family):
    """The functional `transformer(**arguments)` model, each variable made from `weights` (by variable path).

    Args:
        arguments: `transformer()`'s arguments.
        weights: for each variable path, a function reading its NumPy value
            (`layer_weights.take`): one tensor is read at a time, made into
            its variable (`initial_values.initial_values_from`), then let go.
        name: the model's name.
        family: the checkpoint's family, for messages.

    Returns:
        The `keras.Model`.

    Raises:
        RuntimeError: a variable the mapping gives no value for (a bug of the importer, not the user's).
    """
    from keras_transformer import models

    with initial_values_from(weights) as made:
        model = models.transformer(**arguments, name=name)
    variables = {variable.path: variable for variable in model.weights}
    missing = sorted(set(variables) - set(weights))
    if missing:
        raise RuntimeError(f"The {family} converter gives no value for {missing}.")
    for path, variable in variables.items():
        if path not in made:  # not made from its value (no name given, or a path other than the mapping's)
            variable.assign(weights[path]().astype(variable.dtype, copy=False))
    return model


def imported_run_config(arguments):
    """The `config.json` of an imported run: the sizes `train --from` reads, and the rest under `model_options`.

    The sizes are `TrainConfig`'s fields (`preset` "base" names the
    presets' training defaults, which a fine-tuning run replaces with its
    own); the rest of `transformer()`'s arguments go to `model_options`,
    `source_vocabulary_size` among them where the target has a table of
    its own (`vocabulary_size` is then the target's).

    Example:

    >>> imported_run_config(dict(source_vocabulary_size=9, target_vocabulary_size=9, num_layers=1, d_model=4,
    ...                          num_heads=2, ff_dim=8, max_length=16, dropout=0.1, tie_embeddings=True,
    ...                          norm_first=True))["model_options"]
    {'norm_first': True}
    """
    core = {"num_layers", "d_model", "num_heads", "ff_dim", "max_length", "dropout", "tie_embeddings"}
    return {
        "preset": "base", "vocabulary_size": arguments["target_vocabulary_size"],
        **{key: arguments[key] for key in core},
        "model_options": {key: value for key, value in arguments.items()
                          if key not in core and key != "target_vocabulary_size"
                          and (key != "source_vocabulary_size" or value != arguments["target_vocabulary_size"])},
    }
