"""A trained model as a CTranslate2 model: the export, and a translator that runs it.

CTranslate2 is the inference engine that OpenNMT, fairseq and Marian users
deploy translation models on (CPU and GPU, int8 and float16). Its
`TransformerSpec` describes the encoder-decoder `models.transformer()`
builds, post-LN or pre-LN, so the export copies weights and no more: the
position table (sinusoidal or learned) goes in as it is, the embedding
scale, attention logit scale and layer-norm epsilon as numbers, the output
projection tied or not, and the vocabulary in id order (pad, unk, <s>,
</s>: CTranslate2's defaults for the start and end tokens).

`CTranslate2Translator` is a `Translator` whose decoding runs in
CTranslate2: the same tokenizer, the same handling of awkward input, the
same search settings (greedy gives our tokens; beam search differs in its
length normalization, see the class). Needs the `ctranslate2` package
(`pip install "keras-transformer[ctranslate2]"`); the export also needs
Keras to read the model, any backend.
"""

import json
import os

import keras
import numpy as np

from keras_transformer_runtime.batch_threads import resolve_parallel_batches
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID
from keras_transformer.errors import UserInputError
from keras_transformer.model_parts import transformer_parts
from keras_transformer.translation.translator import DEFAULT_BEAM_WIDTH
from keras_transformer.translation.translator import DEFAULT_NO_REPEAT_NGRAM_SIZE
from keras_transformer.translation.translator import resolve_batch_size
from keras_transformer_runtime.text_translator import TextTranslator

# Written beside CTranslate2's own files: what decoding needs that its
# config.json does not hold.
SETTINGS_FILE = "keras_transformer.json"
# CTranslate2's weight types (`Converter.convert(quantization=...)`).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# CTranslate2 ranks finished beams by score / length ** alpha, we by
# score / ((5 + length) / 6) ** alpha. With our alpha, beam 4 gave nearly
# all of our translations and about our BLEU; larger alphas gave fewer of
# them (benchmarks/findings/decoding.md, "Every backend, CTranslate2 and the SavedModel").
DEFAULT_CTRANSLATE2_LENGTH_PENALTY = 0.6
# The only size measured for CTranslate2 (benchmarks/findings/decoding.md); it drops
# the sentences that have ended from a batch as it decodes, so the reason
# small batches win for our loop does not hold there.
DEFAULT_CTRANSLATE2_BATCH_SIZE = 64


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(
            "The CTranslate2 export and translator need the ctranslate2 package: "
            'pip install "keras-transformer[ctranslate2]" (or pip install ctranslate2).'
        ) from error
    return ctranslate2


def _numpy(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


def _activation(layer):
    from ctranslate2.specs import common_spec

    name = keras.activations.serialize(layer.feed_forward.activation)
    name = name if isinstance(name, str) else name.get("config", name)
    supported = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                 "swish": common_spec.Activation.SWISH, "silu": common_spec.Activation.SWISH}
    if name not in supported:
        raise ValueError(
            f"CTranslate2 export supports the activations {sorted(supported)}; {layer.name!r} uses {name!r}."
        )
    return supported[name]


def _check_layer(layer, d_model):
    attention = layer.self_attention
    if attention.key_dim != attention.value_dim or attention.num_heads * attention.key_dim != d_model:
        raise ValueError(
            f"CTranslate2 export needs num_heads * key_dim == value_dim * num_heads == d_model; "
            f"{layer.name!r} has {attention.num_heads} heads of key_dim {attention.key_dim}, "
            f"value_dim {attention.value_dim}, d_model {d_model}."
        )


def _linear(spec, kernel, bias):
    # Keras kernels are (inputs, outputs); CTranslate2's weights (outputs, inputs).
    spec.weight = np.ascontiguousarray(_numpy(kernel).T)
    if bias is not None:
        spec.bias = _numpy(bias)


def _fused_linear(spec, parts):
    spec.weight = np.concatenate([_numpy(kernel).T for kernel, _ in parts], axis=0)
    if all(bias is not None for _, bias in parts):
        spec.bias = np.concatenate([_numpy(bias) for _, bias in parts], axis=0)


def _layer_norm(spec, norm):
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta) if norm.beta is not None else np.zeros_like(spec.gamma)


def _attention(spec, attention, self_attention):
    weights = attention.projection_weights()
    query, key, value = weights["query"], weights["key"], weights["value"]
    if self_attention:
        _fused_linear(spec.linear[0], (query, key, value))
    else:
        _linear(spec.linear[0], *query)
        _fused_linear(spec.linear[1], (key, value))
    _linear(spec.linear[-1], *weights["output"])
    spec.queries_scale = np.float32(attention.scale)


def _feed_forward(spec, feed_forward):
    _linear(spec.linear_0, feed_forward.hidden_dense.kernel, feed_forward.hidden_dense.bias)
    _linear(spec.linear_1, feed_forward.output_dense.kernel, feed_forward.output_dense.bias)


def _embeddings(stack_spec, embeddings_spec, embedding):
    if embedding.merge != "add":
        raise ValueError(
            f"CTranslate2 export needs positions added to the embeddings (merge='add'); "
            f"{embedding.name!r} has merge={embedding.merge!r}."
        )
    embeddings_spec.weight = _numpy(embedding.embeddings)
    stack_spec.scale_embeddings = float(embedding.scale_factor)
    stack_spec.position_encodings.encodings = _numpy(embedding.position_table())


def transformer_spec(model):
    """A CTranslate2 `TransformerSpec` holding the weights of a `transformer()` model.

    Args:
        model: a model from `keras_transformer.models.transformer`, any
            backend.

    Returns:
        `(spec, layer_norm_epsilon)`: a `ctranslate2.specs.TransformerSpec`
        with every weight set (vocabularies not yet registered), and the
        epsilon its config must carry.

    Raises:
        ImportError: `ctranslate2` is not installed.
        ValueError: the model is not a `transformer()`, or has a part
            CTranslate2's spec cannot hold (concatenated positions, an
            activation other than ReLU or GELU, heads narrower than
            `d_model / num_heads`).

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=8)
    >>> spec, epsilon = transformer_spec(model)
    >>> spec.decoder.position_encodings.encodings.shape, epsilon
    ((8, 8), 1e-05)
    """
    _import_ctranslate2()
    from ctranslate2.specs import transformer_spec as ct2_transformer

    parts = transformer_parts(model)
    first = parts.encoder_layers[0]
    d_model = parts.encoder_embedding.d_model
    for layer in parts.encoder_layers + parts.decoder_layers:
        _check_layer(layer, d_model)
    spec = ct2_transformer.TransformerSpec.from_config(
        (len(parts.encoder_layers), len(parts.decoder_layers)),
        first.num_heads,
        pre_norm=first.norm_first,
        activation=_activation(first),
    )
    _embeddings(spec.encoder, spec.encoder.embeddings[0], parts.encoder_embedding)
    _embeddings(spec.decoder, spec.decoder.embeddings, parts.decoder_embedding)
    for layer_spec, layer in zip(spec.encoder.layer, parts.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
        _feed_forward(layer_spec.ffn, layer.feed_forward)
        _layer_norm(layer_spec.ffn.layer_norm, layer.feed_forward_norm)
    for layer_spec, layer in zip(spec.decoder.layer, parts.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
        _attention(layer_spec.attention, layer.cross_attention, self_attention=False)
        _layer_norm(layer_spec.attention.layer_norm, layer.cross_attention_norm)
        _feed_forward(layer_spec.ffn, layer.feed_forward)
        _layer_norm(layer_spec.ffn.layer_norm, layer.feed_forward_norm)
    if first.norm_first:
        _layer_norm(spec.encoder.layer_norm, parts.encoder_final_norm)
        _layer_norm(spec.decoder.layer_norm, parts.decoder_final_norm)
    if parts.output_projection is None:  # tied: the decoder's embedding matrix (and Marian's logits bias)
        spec.decoder.projection.weight = _numpy(parts.decoder_embedding.embeddings)
        if parts.decoder_embedding.output_bias:
            spec.decoder.projection.bias = _numpy(parts.decoder_embedding.logits_bias)
    else:
        _linear(spec.decoder.projection, parts.output_projection.kernel, parts.output_projection.bias)
    return spec, float(first.layer_norm_epsilon)


def _source_pieces(tokenizer):
    """The source side's pieces by id: `get_vocabulary()`, unless the target has a table of its own."""
    return getattr(tokenizer, "get_source_vocabulary", tokenizer.get_vocabulary)()


def export_ctranslate2(directory, out, quantization=None, force=False):
    """Writes a training run's model as a CTranslate2 model directory.

    The directory holds CTranslate2's `model.bin`, `config.json` and
    `shared_vocabulary.json` (`source_vocabulary.json` and
    `target_vocabulary.json` for a Marian run whose target has a table of
    its own), the run's `vocabulary.spm` (to tokenize), and
    `keras_transformer.json` (the model's `max_length`, for
    `CTranslate2Translator`). Serve it with `CTranslate2Translator`, or
    with `ctranslate2.Translator` and SentencePiece directly (docs/translating.md).

    Args:
        directory: the `--output` folder of `keras-transformer train`.
        out: the folder to write; must not exist unless `force`.
        quantization: weight type stored on disk, one of `QUANTIZATIONS`
            (CTranslate2 can also quantize when loading: its
            `compute_type`). Defaults to the model's float32.
        force: replace `out` if it exists.

    Returns:
        `out`.

    Raises:
        ImportError: `ctranslate2` is not installed.
        UserInputError: no model or vocabulary in `directory`, `out` exists
            (without `force`), or an unknown `quantization`.
        ValueError: a model CTranslate2 cannot represent (see
            `transformer_spec`).
    """
    ctranslate2 = _import_ctranslate2()
    from keras_transformer import model_file
    from keras_transformer_runtime.run_files import MODEL_FILE
    from keras_transformer_runtime.run_tokenizer import is_marian_run
    from keras_transformer_runtime.run_tokenizer import is_nllb_run
    from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
    from keras_transformer_runtime.run_tokenizer import vocabulary_files

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UserInputError(f"quantization must be one of {', '.join(QUANTIZATIONS)}; got {quantization!r}.")
    if os.path.exists(out) and not force:
        raise UserInputError(f"{out!r} exists: choose a new folder for the CTranslate2 model, or pass force=True.")
    names = vocabulary_files(directory)
    for name in names:
        if not os.path.isfile(os.path.join(directory, name)):
            raise UserInputError(f"No vocabulary at {os.path.join(directory, name)!r}: pass the --output folder "
                                 "of a training run.")
    model = model_file.load_model(os.path.join(directory, MODEL_FILE), compile=False)
    spec, epsilon = transformer_spec(model)
    tokenizer = load_run_tokenizer(directory)
    pieces = tokenizer.get_vocabulary()
    # A Marian target with a table of its own: CTranslate2 then writes source_ and target_vocabulary.json.
    spec.register_source_vocabulary(_source_pieces(tokenizer))
    spec.register_target_vocabulary(pieces)
    spec.config.layer_norm_epsilon = epsilon
    # A Marian model starts from its padding token, a run trained here from <s>.
    spec.config.decoder_start_token = pieces[transformer_parts(model).decoder_start_id]
    for name in names:
        spec.register_file(os.path.join(directory, name), name)

    class _SpecConverter(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    _SpecConverter().convert(out, quantization=quantization, force=force)
    if is_marian_run(directory):
        from keras_transformer.checkpoints.marian import copy_vocabulary_files

        copy_vocabulary_files(directory, out)  # tokenizer_config.json too, which names the specials
    if is_nllb_run(directory):
        from keras_transformer.checkpoints.nllb.run_import import copy_tokenizer_files

        copy_tokenizer_files(directory, out)
    parts = transformer_parts(model)
    settings = {"max_length": int(parts.decoder_embedding.max_length), "decoder_start_id": parts.decoder_start_id}
    with open(os.path.join(out, SETTINGS_FILE), "w", encoding="utf-8") as file:
        json.dump(settings, file, indent=2)
        file.write("\n")
    return out


class CTranslate2Translator(TextTranslator):
    """A `Translator` whose model runs in CTranslate2, from `export_ctranslate2`'s folder.

    Strings in, strings out, as `Translator`: the same tokenizer, the same
    handling of empty, undecodable, too long or mostly unknown input, the
    same batching in input order, the same loop guard and forbidden tokens
    (padding and start). Greedy search (`beam_width=1`) gives the tokens of
    `Translator(beam_width=1)` on the same model, up to float rounding.
    Beam search ranks finished hypotheses by CTranslate2's
    `score / length ** length_penalty`, not our
    `score / ((5 + length) / 6) ** length_penalty`: with the same 0.6,
    nearly every translation is ours, at about the same BLEU
    (benchmarks/findings/decoding.md).

    Args:
        directory: a folder written by `export_ctranslate2`.
        beam_width: int, 1 for greedy search. Defaults to 4.
        length_penalty: float, CTranslate2's. Defaults to 0.6.
        max_new_tokens: int, longest translation. Defaults to the model's
            `max_length - 1`.
        no_repeat_ngram_size: int, as `Translator`'s. Defaults to 3.
        batch_size: int, sentences decoded at once. Defaults to 64.
        device: `"cpu"`, `"cuda"` or `"auto"`. Defaults to `"cpu"`.
        compute_type: CTranslate2's, e.g. `"default"` (the stored type),
            `"int8"`, `"float16"`. Defaults to `"default"`.
        intra_threads: threads per translation (0: CTranslate2's choice).
        parallel_batches: int or `"auto"` (one a core on a CPU), batches translated at a time, each on its
            own CTranslate2 worker (its `inter_threads`) and thread of ours
            (`batch_threads`). Defaults to 1. On a CPU a batch a core, one
            thread each, was faster than one batch on every core, and more
            batches than cores no faster (benchmarks/findings/decoding.md,
            "The compiled engine on a CPU").

    Raises:
        ImportError: `ctranslate2` is not installed.
        FileNotFoundError: `directory` is not an exported model.

    Example (an untrained model, exported; the output is a string, not yet English):

    >>> import os, tempfile
    >>> import keras_transformer as kt
    >>> from keras_transformer_runtime.run_files import MODEL_FILE, VOCABULARY_FILE
    >>> from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer
    >>> run = tempfile.mkdtemp()
    >>> _ = train_tokenizer(["Sea la luz.", "Let there be light."], vocabulary_size=20,
    ...                     path=os.path.join(run, VOCABULARY_FILE))
    >>> kt.models.transformer(20, 20, num_layers=1, d_model=8, num_heads=2, ff_dim=16,
    ...                       max_length=8).save(os.path.join(run, MODEL_FILE))
    >>> out = export_ctranslate2(run, os.path.join(run, "ct2"))
    >>> outputs = CTranslate2Translator(out)(["Sea la luz.", ""])
    >>> [type(text).__name__ for text in outputs], outputs[1]
    (['str', 'str'], '')
    >>> (result,) = CTranslate2Translator(out, beam_width=2).translate_batch([[5, 6]], num_hypotheses=2)
    >>> len(result.hypotheses)  # every hypothesis of the beam, each a list of target pieces
    2
    """

    def __init__(self, directory, beam_width=DEFAULT_BEAM_WIDTH, length_penalty=DEFAULT_CTRANSLATE2_LENGTH_PENALTY,
                 max_new_tokens=None, no_repeat_ngram_size=DEFAULT_NO_REPEAT_NGRAM_SIZE,
                 batch_size=DEFAULT_CTRANSLATE2_BATCH_SIZE, device="cpu", compute_type="default", intra_threads=0,
                 parallel_batches=1):
        ctranslate2 = _import_ctranslate2()
        from keras_transformer_runtime.run_tokenizer import load_run_tokenizer

        settings_path = os.path.join(directory, SETTINGS_FILE)
        if not os.path.isfile(settings_path):
            raise FileNotFoundError(
                f"{directory!r} is not a model written by export_ctranslate2 (no {SETTINGS_FILE}): "
                "run `keras-transformer export --format ctranslate2` first."
            )
        with open(settings_path, encoding="utf-8") as file:
            settings = json.load(file)
        self.tokenizer = load_run_tokenizer(directory)
        start = settings.get("decoder_start_id", START_ID)
        # As the decoding loop's (`sampler.forbidden_token_ids`): a model that starts from </s> may still end.
        self._forbidden = sorted({PAD_ID} | ({start} if start != END_ID else set()))
        self._pieces = self.tokenizer.get_vocabulary()
        self._source_pieces = _source_pieces(self.tokenizer)
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
        self._character_is_known = {}
        self.max_length = int(settings["max_length"])
        self.beam_width = int(beam_width)
        self.length_penalty = float(length_penalty)
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)
        self.max_new_tokens = int(max_new_tokens or self.max_length - 1)
        if not 1 <= self.max_new_tokens < self.max_length:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be in [1, max_length={self.max_length}).")
        self.batch_size = resolve_batch_size(batch_size, compiled=False)
        self.bucketed = False
        self.parallel_batches = resolve_parallel_batches(parallel_batches, lambda: device != "cpu")
        self.translator = ctranslate2.Translator(
            directory, device=device, compute_type=compute_type, intra_threads=intra_threads,
            inter_threads=self.parallel_batches,
        )

    def _padded_batch(self, ids, batch_rows=None, zeros=False):
        return ids  # CTranslate2 takes rows of tokens and pads them itself

    def _decode(self, source):
        return [[self._ids[piece] for piece in result.hypotheses[0]] + [END_ID] for result in self.translate_batch(source)]

    def translate_batch(self, source, **options):
        """CTranslate2's `TranslationResult`s of rows of source ids, searched as this translator searches.

        Args:
            source: rows of source token ids (no padding needed).
            **options: more of `ctranslate2.Translator.translate_batch`'s
                arguments, e.g. `num_hypotheses` (the search is the same).

        Returns:
            A list of `ctranslate2.TranslationResult`, one a row.

        Example: the class's last lines.
        """
        return self.translator.translate_batch(
            [[self._source_pieces[int(i)] for i in row] for row in source],
            beam_size=self.beam_width,
            length_penalty=self.length_penalty,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            max_decoding_length=self.max_new_tokens,
            suppress_sequences=[[self._pieces[i]] for i in self._forbidden],
            max_batch_size=self.batch_size,
            # An NLLB-200 run writes the target language first (transformers' forced_bos_token_id).
            target_prefix=None if self.forced_first_id is None else [[self._pieces[self.forced_first_id]]] * len(source),
            **options,
        )
