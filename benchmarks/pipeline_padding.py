"""Vocabulary and batching statistics on the embedded corpus (train split): python -m benchmarks.pipeline_padding"""
import time
import numpy as np
from keras_transformer.data import load_bible_pairs
from keras_transformer.data.tokenizer import train_tokenizer, load_tokenizer
from keras_transformer.data.pipeline import tokenize_pairs, translation_dataset, padding_fraction

pairs = load_bible_pairs("train")
texts = [p.source for p in pairs] + [p.target for p in pairs]
print(f"train pairs {len(pairs)}, texts {len(texts)}")
t = time.perf_counter(); proto = train_tokenizer(texts, vocabulary_size=8000, path=None)
print(f"train vocabulary (8000): {time.perf_counter() - t:.1f} s")
tokenizer = load_tokenizer(proto)
t = time.perf_counter(); tokenized = tokenize_pairs(pairs, tokenizer, max_length=128)
print(f"tokenize {len(pairs)} pairs: {time.perf_counter() - t:.2f} s")
print(f"truncated (max_length 128): {tokenized.num_truncated}")
full = tokenize_pairs(pairs, tokenizer, max_length=10_000)
for name, rt in (("source", full.sources), ("target", full.targets)):
    n = rt.row_lengths().numpy()
    print(f"{name} tokens: mean {n.mean():.1f}, median {np.median(n):.0f}, p99 {np.percentile(n, 99):.0f}, max {n.max()}")
for bucket in (True, False):
    ds = translation_dataset(tokenized, batch_tokens=4096, bucket=bucket, seed=0)
    t = time.perf_counter()
    shapes, real, size = [], 0, 0
    for inputs, labels in ds:
        e = inputs["encoder_tokens"].numpy(); d = inputs["decoder_tokens"].numpy()
        shapes.append(e.shape); real += (e != 0).sum() + (d != 0).sum(); size += e.size + d.size
    dt = time.perf_counter() - t
    pf = padding_fraction(translation_dataset(tokenized, batch_tokens=4096, bucket=bucket, seed=0))
    bs = [s[0] for s in shapes]; tok = [s[0] * s[1] for s in shapes]
    print(f"bucket={bucket}: padding {1 - real / size:.3f} (padding_fraction {pf:.3f}), batches {len(shapes)}, distinct shapes {len(set(shapes))}, "
          f"mean batch size {np.mean(bs):.1f}, tokens/batch mean {np.mean(tok):.0f} max {max(tok)}, epoch iteration {dt:.1f} s")
