"""A small NLLB-200 or M2M-100 model made with transformers (random weights), saved as the hub holds one.

For the NLLB-200 tests (`make_nllb_folder`) and the M2M-100 ones
(`make_nllb_folder(..., make_tokenizer=make_m2m100_tokenizer)`).
"""

import json

import numpy as np

SENTENCES = ["Y dijo Dios: Sea la luz; y fue la luz.", "¿Dónde está el niño?", "La luz era buena.",
             "Sea la luz.", "Y vio Dios que la luz era buena; y separó Dios la luz de las tinieblas."]
_CORPUS = SENTENCES + ["And God said, Let there be light: and there was light.", "Where is the child?",
                       "The light was good.", "Le chef de l'ONU affirme qu'il n'y a pas de solution militaire."]


def make_nllb_tokenizer(folder, pieces=160):
    """Saves an `NllbTokenizer` (a BPE of `pieces` learned on a few sentences, NLLB's 202 language codes) in `folder`."""
    from tokenizers import Tokenizer
    from tokenizers import models
    from tokenizers import pre_tokenizers
    from tokenizers import trainers
    from transformers import NllbTokenizer

    bpe = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    bpe.train_from_iterator(_CORPUS * 3, trainers.BpeTrainer(vocab_size=pieces,
                                                             special_tokens=["<s>", "<pad>", "</s>", "<unk>"]))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]
    tokenizer = NllbTokenizer(vocab=model["vocab"], merges=merges, src_lang="spa_Latn", tgt_lang="eng_Latn")
    tokenizer.save_pretrained(folder)
    return tokenizer


def make_m2m100_tokenizer(folder, pieces=120):
    """Saves an `M2M100Tokenizer` in `folder`, as transformers 5 re-saves `facebook/m2m100_418M`'s.

    A SentencePiece BPE of `pieces` learned on a few sentences, and a
    `vocab.json` in fairseq's order (`<s>`, `<pad>`, `</s>`, `<unk>`, then
    the pieces shuffled, one left out: it tokenizes as `<unk>`), M2M-100's
    100 language tokens named (`additional_special_tokens`), so that
    `tokenizer_config.json` holds their ids (`added_tokens_decoder`).
    """
    import io
    import os
    import random

    import sentencepiece
    from transformers import M2M100Tokenizer
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_CORPUS * 3), model_writer=model, model_type="bpe", vocab_size=pieces,
        character_coverage=1.0, input_sentence_size=0, hard_vocab_limit=False, shuffle_input_sentence=False,
        num_threads=1, minloglevel=2)
    os.makedirs(folder, exist_ok=True)
    spm_path, vocab_path = os.path.join(folder, "sentencepiece.bpe.model"), os.path.join(folder, "vocab.json")
    with open(spm_path, "wb") as f:
        f.write(model.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    words = [processor.id_to_piece(i) for i in range(processor.get_piece_size()) if not processor.is_control(i)
             and not processor.is_unknown(i)]
    random.Random(0).shuffle(words)
    vocab = {piece: i for i, piece in enumerate(["<s>", "<pad>", "</s>", "<unk>", *words[1:]])}
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    languages = [f"__{code}__" for code in FAIRSEQ_LANGUAGE_CODES["m2m100"]]
    tokenizer = M2M100Tokenizer(vocab_path, spm_path, src_lang="es", tgt_lang="fr",
                                additional_special_tokens=languages)
    tokenizer.save_pretrained(folder)
    return tokenizer


def make_nllb_folder(folder, d_model=16, layers=2, heads=2, ffn=32, seed=0, extra_rows=2, init_std=0.5, eos_scale=2.5,
                     make_tokenizer=make_nllb_tokenizer, max_positions=64):
    """Saves a small random `M2M100ForConditionalGeneration` with an NLLB tokenizer (or `make_tokenizer`'s) in `folder`.

    Every bias and LayerNorm parameter is random (transformers starts them
    at 0 and 1), and the vocabulary has `extra_rows` rows the tokenizer
    lacks, as NLLB-200's has two (M2M-100's eight).

    Returns:
        The folder.
    """
    import torch
    from transformers import M2M100Config
    from transformers import M2M100ForConditionalGeneration

    tokenizer = make_tokenizer(folder)
    config = M2M100Config(vocab_size=len(tokenizer) + extra_rows, d_model=d_model, encoder_layers=layers,
                          decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                          encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_position_embeddings=max_positions, dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
                          decoder_layerdrop=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, scale_embedding=True, tie_word_embeddings=True, init_std=init_std)
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1
                                + (1.0 if "layer_norm.weight" in name else 0.0))
            elif name.endswith("shared.weight"):
                # Short rows for the language tokens, so that the model writes pieces too.
                rows = torch.randn(parameter.shape, generator=generator)
                rows[tokenizer.convert_tokens_to_ids(list(tokenizer.extra_special_tokens))] *= 0.05
                rows[config.eos_token_id] *= eos_scale  # a longer </s> row: some translations end
                parameter.copy_(rows)
    model.save_pretrained(folder)
    return folder


def load_nllb_reference(folder):
    """`(model, tokenizer)` of transformers for a folder `make_nllb_folder` wrote (offline)."""
    from transformers import AutoTokenizer
    from transformers import M2M100ForConditionalGeneration

    model = M2M100ForConditionalGeneration.from_pretrained(folder, local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(folder, local_files_only=True)


def reference_tokenizer(folder, source, target):
    """transformers' tokenizer of `folder` for one pair; the test is skipped where transformers cannot give it.

    transformers 5.0's `NllbTokenizer` keeps the language token of the
    tokenizer.json it loaded whatever `src_lang` and `tgt_lang` say (5.24's follows them).
    """
    import pytest
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, src_lang=source, tgt_lang=target)
    if (tokenizer("a")["input_ids"][0], tokenizer(text_target="a")["input_ids"][0]) != (
            tokenizer.convert_tokens_to_ids(source), tokenizer.convert_tokens_to_ids(target)):
        import transformers

        pytest.skip(f"transformers {transformers.__version__}'s NllbTokenizer does not switch to {source} -> {target}")
    return tokenizer


def nllb_generate(model, tokenizer, sentences, source, target, beams=1, max_new_tokens=20):
    """transformers' translations of `sentences` from `source` into `target` (`generate` with `forced_bos_token_id`)."""
    import torch

    tokenizer.src_lang = source
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        limit = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}  # None: the model's defaults
        generated = model.generate(**batch, num_beams=beams, do_sample=False, **limit,
                                   forced_bos_token_id=tokenizer.convert_tokens_to_ids(target))
    return tokenizer.batch_decode(generated, skip_special_tokens=True), np.asarray(generated)


def assert_batches_tokenized_as(run, their_tokenizer, languages, tmp_path, name):
    """`train --from RUN`'s dev batches hold the shortest dev pair as `their_tokenizer` (transformers') gives it.

    The source as theirs, the labels as their target, and the decoder's
    input `</s>` then the target less its last token (NLLB-200's and
    M2M-100's teacher forcing).
    """
    import numpy as np
    from conftest import FIXTURE_CORPUS

    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.training.train_input import TrainInput
    from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
    from keras_transformer_runtime.special_tokens import END_ID
    from keras_transformer_runtime.special_tokens import PAD_ID

    tokenizer = load_run_tokenizer(run)
    inputs = TrainInput(ParallelCorpus(FIXTURE_CORPUS), max_length=64, batch_tokens=400, vocabulary_from=str(run),
                        decoder_start_id=END_ID, languages=languages)
    corpus_data = inputs.read_corpus(log=lambda line: None)  # also checks how much of it the vocabulary spells
    inputs.write_vocabulary(corpus_data, str(tmp_path / "vocabulary.spm"))
    dev = inputs.train_data(corpus_data, str(tmp_path / "vocabulary.spm"), 0, lambda line: None).dev
    pair = min(corpus_data.splits["dev"], key=lambda pair: len(pair.source) + len(pair.target))
    source = their_tokenizer([pair.source])["input_ids"][0]
    target = their_tokenizer(text_target=[pair.target])["input_ids"][0]

    def theirs(row):
        row = np.asarray(row)
        return tokenizer.model_ids[row[row != PAD_ID]].tolist()

    rows = [(batch, labels, i) for batch, labels in (dev[j] for j in range(dev.num_batches))
            for i in range(len(labels)) if theirs(batch["encoder_tokens"][i]) == source]
    assert rows, f"the pair's source is not tokenized as {name} does"
    batch, labels, row = rows[0]
    assert theirs(labels[row]) == target
    assert theirs(batch["decoder_tokens"][row]) == [2, *target[:-1]]
