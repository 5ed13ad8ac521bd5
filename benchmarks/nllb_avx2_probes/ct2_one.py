import sys, time
t0 = time.perf_counter()
import ctranslate2, transformers
folder, model_dir = sys.argv[1], sys.argv[2]
tok = transformers.AutoTokenizer.from_pretrained(folder, src_lang="spa_Latn")
t1 = time.perf_counter()
tr = ctranslate2.Translator(model_dir, device="cpu", intra_threads=2)
t2 = time.perf_counter()
src = tok.convert_ids_to_tokens(tok.encode("¿Dónde está el niño?"))
res = tr.translate_batch([src], target_prefix=[["eng_Latn"]], beam_size=1, max_decoding_length=33)
t3 = time.perf_counter()
out = tok.decode(tok.convert_tokens_to_ids(res[0].hypotheses[0][1:]))
print(f"CT2 imports+tokenizer {t1-t0:.2f} load {t2-t1:.2f} translate {t3-t2:.2f} tokens {len(res[0].hypotheses[0])}")
