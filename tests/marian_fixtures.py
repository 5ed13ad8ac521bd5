"""Builds small Hugging Face `MarianMTModel` folders, offline, for tests of OPUS-MT converters.

`make_marian_folder` writes a folder laid out as the OPUS-MT models on the
Hugging Face hub (`Helsinki-NLP/opus-mt-*`) have it: `config.json`,
`generation_config.json`, the weights (`model.safetensors`, or
`pytorch_model.bin` as older uploads have it), `source.spm`, `target.spm`,
`vocab.json` and `tokenizer_config.json`. Nothing is downloaded: the two
SentencePiece models are trained on the fly on the fixture corpus (Spanish
source, English target), and the model's weights are random.

The weights are drawn so that a converter that drops, swaps or transposes a
tensor gives different logits: every bias, every LayerNorm scale and shift
and `final_logits_bias` are random and non-zero, and the weight matrices are
drawn at a scale where the translations depend on the input (at Hugging
Face's own initialization, std 0.02, or with biases of std 0.5, the biases
decide the output and every input gets the same translation). The shared
embedding's `<pad>` row is zero, as in the OPUS-MT models. The
SentencePiece models cut the fixture's sentences into short pieces, often
single characters: keep test sentences under about 50 characters, so that
they fit `max_position_embeddings` (64) with their `</s>`.

torch, transformers and sentencepiece are imported inside the function, so
importing this module never fails; tests that call it should skip when they
are missing.

A test module defines a module-scoped `marian_folder` fixture and imports
the fixtures built on it here: `reference` (transformers' model and
tokenizer), `imported` (this package's, `load_marian`) and `imported_run`
(the folder written as a run by `keras-transformer import`).
"""

import csv
import gzip
import io
import json
import math
import os
import pathlib
import warnings

import pytest

FIXTURE_CORPUS = pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz"

# The control pieces of the SentencePiece models, left out of vocab.json (which has its own).
_SPM_CONTROL_PIECES = ("<unk>", "<s>", "</s>")


def _read_fixture_pairs(path=FIXTURE_CORPUS, limit=300):
    """(Spanish, English) pairs of the fixture corpus: its `es` and `en_web` columns, in file order."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        pairs = [(row["es"], row["en_web"]) for row in rows]
    return pairs[:limit]


def _train_spm(sentences, vocabulary_pieces):
    """Serialized unigram SentencePiece model; the same sentences always give the same bytes."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocabulary_pieces,
        character_coverage=1.0,
        input_sentence_size=0,  # every sentence, no sampling
        hard_vocab_limit=False,  # fewer pieces, rather than an error, for a small `texts`
        shuffle_input_sentence=False,
        num_threads=1,
        # OPUS-MT's ids, which are SentencePiece's defaults: <unk> 0, <s> 1, </s> 2, no pad piece.
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


def _spm_pieces(serialized):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=serialized)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def _opus_vocab(source_pieces, target_pieces, size=None, language_codes=()):
    """vocab.json as OPUS-MT has it: `</s>` 0, `<unk>` 1, language tokens, the pieces of both models, `<pad>` last.

    With `size`, filler pieces no text produces (`▁filler0`, ...) make it `size` ids long.
    """
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in [*(f">>{code}<<" for code in language_codes), *source_pieces, *target_pieces]:
        if piece not in _SPM_CONTROL_PIECES and piece not in vocab:
            vocab[piece] = len(vocab)
    while size is not None and len(vocab) < size - 1:
        vocab[f"\u2581filler{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def make_marian_folder(
    path,
    *,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    heads=2,
    ffn_dim=32,
    max_position_embeddings=64,
    vocabulary_pieces=120,
    seed=0,
    weights="safetensors",
    texts=None,
    vocabulary_size=None,
    language_codes=(),
    separate_vocabularies=False,
    target_vocabulary_size=None,
):
    """Writes a small random OPUS-MT style `MarianMTModel` folder (Spanish to English) and returns its path.

    The folder holds `config.json` and `generation_config.json`, the weights,
    `source.spm` and `target.spm` (unigram SentencePiece models trained here,
    with OPUS-MT's ids `<unk>` 0, `<s>` 1, `</s>` 2 and no pad piece),
    `vocab.json` (`</s>` 0, `<unk>` 1, the pieces of the source and then of
    the target model that are new, `<pad>` last) and `tokenizer_config.json`;
    `MarianMTModel.from_pretrained` and `MarianTokenizer.from_pretrained`
    load it. The vocabulary size V is `len(vocab.json)`; `<pad>` (V - 1) is
    the pad and decoder start token, `</s>` (0) the end of sentence, and the
    generation config has OPUS-MT's settings: `num_beams=4`,
    `bad_words_ids=[[V - 1]]`, `forced_eos_token_id=0`,
    `renormalize_logits=True`, `max_length=max_position_embeddings`.

    The same arguments always give the same files: the SentencePiece models
    are trained deterministically, and every weight is drawn from a
    generator seeded with `seed`.

    Args:
        path: The folder to write; it is created if missing, and files of
            the same names in it are overwritten.
        d_model: The model's width.
        encoder_layers: The number of encoder layers.
        decoder_layers: The number of decoder layers.
        heads: The attention heads of every attention layer.
        ffn_dim: The inner width of the feed-forward blocks.
        max_position_embeddings: The number of sinusoidal positions, also
            the generation config's `max_length`.
        vocabulary_pieces: The pieces of each SentencePiece model (their
            control pieces included); vocab.json has fewer than twice as
            many (175 for the default 120).
        seed: The seed of the weights.
        weights: `"safetensors"` (`model.safetensors`, what
            `save_pretrained` writes, without the tied and the sinusoidal
            tensors) or `"bin"` (`pytorch_model.bin`, the `torch.save`d
            full `state_dict()`, as older transformers wrote it: the tied
            embedding under all its names, `lm_head.weight` included, and
            the sinusoidal position tables).
        texts: (Spanish, English) pairs to train the SentencePiece models
            on; by default the 300 sentence pairs of
            `tests/fixtures/bible_es_en_small.tsv.gz` (`es`, `en_web`).
        vocabulary_size: The size of vocab.json (opus-mt-es-en's is
            65,001), filled with pieces no text produces; by default just
            the pieces of the two SentencePiece models and the specials.
        language_codes: target-language codes (`"fra"`, ...) whose tokens
            (`>>fra<<`) vocab.json holds after `<unk>`, as a multi-target
            OPUS-MT model (opus-mt-en-ROMANCE) has them.
        separate_vocabularies: give the target a table of its own, as the
            newer Tatoeba-Challenge conversions have it: vocab.json numbers
            the source pieces (and the language tokens), target_vocab.json
            the target's, each with its specials and `<pad>` last;
            `decoder_vocab_size` is the target table's size,
            `share_encoder_decoder_embeddings` false, and the source table
            is filled to be the larger (the encoder's embedding takes the
            decoder's padding id too).
        target_vocabulary_size: with `separate_vocabularies`, the size of
            target_vocab.json, filled as `vocabulary_size` fills vocab.json;
            by default just the target model's pieces and the specials.

    Returns:
        The folder's path, as a string.

    Example:
        >>> folder = make_marian_folder(tmp_path / "opus-mt-es-en")  # doctest: +SKIP
        >>> from transformers import MarianMTModel, MarianTokenizer  # doctest: +SKIP
        >>> tokenizer = MarianTokenizer.from_pretrained(folder)  # doctest: +SKIP
        >>> model = MarianMTModel.from_pretrained(folder)  # doctest: +SKIP
        >>> batch = tokenizer(["¿Dónde está el niño?"], return_tensors="pt")  # doctest: +SKIP
        >>> tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)  # doctest: +SKIP
    """
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    if weights not in ("safetensors", "bin"):
        raise ValueError(f"weights must be 'safetensors' or 'bin', not {weights!r}")
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)

    pairs = _read_fixture_pairs() if texts is None else [(str(es), str(en)) for es, en in texts]
    if not pairs:
        raise ValueError("texts is empty")
    source_spm = _train_spm([es for es, _ in pairs], vocabulary_pieces)
    target_spm = _train_spm([en for _, en in pairs], vocabulary_pieces)
    (path / "source.spm").write_bytes(source_spm)
    (path / "target.spm").write_bytes(target_spm)
    if separate_vocabularies:
        target_vocab = _opus_vocab((), _spm_pieces(target_spm), target_vocabulary_size)
        vocab = _opus_vocab(_spm_pieces(source_spm), (), max(vocabulary_size or 0, len(target_vocab) + 8),
                            language_codes)
        with open(path / "target_vocab.json", "w", encoding="utf-8") as f:
            json.dump(target_vocab, f, ensure_ascii=False, indent=2)
    else:
        vocab = _opus_vocab(_spm_pieces(source_spm), _spm_pieces(target_spm), vocabulary_size, language_codes)
        target_vocab = vocab
    with open(path / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    vocab_size = len(vocab)
    pad = len(target_vocab) - 1  # the decoder's padding and start token

    config = MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=len(target_vocab),
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
        max_position_embeddings=max_position_embeddings,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        bos_token_id=0,
        forced_eos_token_id=0,
        decoder_start_token_id=pad,
        share_encoder_decoder_embeddings=not separate_vocabularies,
        tie_word_embeddings=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    with torch.random.fork_rng(devices=[]):  # seeds Hugging Face's initialization, leaves the caller's generator be
        torch.manual_seed(seed)
        model = MarianMTModel(config)
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        bos_token_id=0,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_length=max_position_embeddings,
        num_beams=4,
        pad_token_id=pad,
        renormalize_logits=True,
    )
    _randomize(model, torch, seed, {"encoder": vocab["<pad>"], "decoder": pad})
    model.eval()

    if weights == "safetensors":
        model.save_pretrained(path)
    else:
        model.save_pretrained(path)  # config.json and generation_config.json
        os.remove(path / "model.safetensors")
        state = {name: tensor.detach().clone().contiguous() for name, tensor in model.state_dict().items()}
        torch.save(state, path / "pytorch_model.bin")

    with warnings.catch_warnings():  # MarianTokenizer asks for sacremoses, which it never uses to encode
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        tokenizer = MarianTokenizer(
            source_spm=str(path / "source.spm"),
            target_spm=str(path / "target.spm"),
            vocab=str(path / "vocab.json"),
            source_lang="es",
            target_lang="en",
            model_max_length=512,
            **({"target_vocab_file": str(path / "target_vocab.json"), "separate_vocabs": True}
               if separate_vocabularies else {}),
        )
    tokenizer.save_pretrained(path)  # tokenizer_config.json
    # save_pretrained rewrites vocab.json with json.dump's default ASCII escapes; keep it as written above.
    for name, table in (("vocab.json", vocab), ("target_vocab.json", target_vocab if separate_vocabularies else None)):
        if table is not None:
            with open(path / name, "w", encoding="utf-8") as f:
                json.dump(table, f, ensure_ascii=False, indent=2)
    return str(path)


def _randomize(model, torch, seed, pads):
    """Draws every weight of `model` from a generator seeded with `seed`, in a fixed order.

    Matrices: normal / sqrt(fan-in); each token embedding (the shared one, or
    the encoder's and the decoder's): normal * 0.5 with a zero `<pad>` row
    (`pads`: its id in each side's table); biases, LayerNorm shifts and `final_logits_bias`:
    normal * 0.1; LayerNorm scales: 1 + normal * 0.2. The sinusoidal
    position tables are left as the model computes them. Larger biases make
    this random model give every input the same translation.
    """
    generator = torch.Generator().manual_seed(seed)

    def normal(tensor, scale, offset=0.0):
        values = torch.randn(tensor.shape, generator=generator, dtype=torch.float32) * scale + offset
        with torch.no_grad():
            tensor.copy_(values.to(tensor.dtype))

    layer_norms = {name for name, module in model.named_modules() if isinstance(module, torch.nn.LayerNorm)}
    embeddings = {id(model.get_encoder().embed_tokens.weight): pads["encoder"],
                  id(model.get_decoder().embed_tokens.weight): pads["decoder"]}
    for name, parameter in model.named_parameters(remove_duplicate=True):
        module_name, _, kind = name.rpartition(".")
        if "embed_positions" in module_name:
            continue
        if id(parameter) in embeddings:
            normal(parameter, 0.5)
            with torch.no_grad():
                parameter[embeddings[id(parameter)]].zero_()
        elif module_name in layer_norms and kind == "weight":
            normal(parameter, 0.2, 1.0)
        elif kind == "bias":
            normal(parameter, 0.1)
        elif parameter.dim() == 2:
            normal(parameter, 1.0 / math.sqrt(parameter.shape[1]))
        else:
            raise AssertionError(f"unexpected parameter {name} {tuple(parameter.shape)}")
    normal(model.final_logits_bias, 0.1)
    if model.lm_head.weight is not model.get_decoder().embed_tokens.weight:
        raise AssertionError("lm_head is not tied to the decoder's embedding")


def load_reference(folder):
    """`(MarianMTModel, MarianTokenizer)` of a folder, as transformers loads it (the model in eval mode)."""
    from transformers import MarianMTModel, MarianTokenizer

    with warnings.catch_warnings():  # MarianTokenizer asks for sacremoses, which it never uses to encode
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        return (MarianMTModel.from_pretrained(folder, local_files_only=True).eval(),
                MarianTokenizer.from_pretrained(folder, local_files_only=True))


def generate_translations(reference, sentences, max_new_tokens, beams=1, drop_start=False, **options):
    """What `reference` (`load_reference`) writes for `sentences` with `generate`, decoded without specials.

    `max_length` counts the start token, and `forced_eos_token_id` ends a
    translation at the limit with `</s>`, one position more than this
    package's loop (which stops without it) spends: hence `+ 2`. With
    `drop_start`, the start token is cut before decoding (with separate
    tables transformers' special ids are the source table's, so
    `skip_special_tokens` would keep the decoder's own `<pad>` as text).
    """
    import torch

    model, tokenizer = reference
    batch = tokenizer(list(sentences), return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=beams, max_length=max_new_tokens + 2, do_sample=False,
                                   **options)
    return tokenizer.batch_decode(generated[:, 1:] if drop_start else generated, skip_special_tokens=True)


@pytest.fixture(scope="module")
def reference(marian_folder):
    """transformers' `(MarianMTModel, MarianTokenizer)` of the module's `marian_folder`."""
    return load_reference(marian_folder)


@pytest.fixture(scope="module")
def imported(marian_folder):
    """This package's `(model, MarianTokenizer)` of the module's `marian_folder` (`load_marian`)."""
    from keras_transformer.checkpoints import load_marian

    return load_marian(marian_folder)


@pytest.fixture(scope="module")
def imported_run(marian_folder, tmp_path_factory):
    """The module's `marian_folder` written as a run folder by `keras-transformer import`."""
    from keras_transformer_cli import main

    run = tmp_path_factory.mktemp("runs") / pathlib.Path(marian_folder).name
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    return str(run)
