import sys, time
t0 = time.perf_counter()
import torch, transformers
torch.set_num_threads(2)
folder = sys.argv[1]
tok = transformers.AutoTokenizer.from_pretrained(folder, src_lang="spa_Latn")
t1 = time.perf_counter()
model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
t2 = time.perf_counter()
batch = tok(["¿Dónde está el niño?"], return_tensors="pt")
with torch.no_grad():
    out = model.generate(**batch, forced_bos_token_id=tok.convert_tokens_to_ids("eng_Latn"), num_beams=1,
                         do_sample=False, max_length=34, min_length=0)
t3 = time.perf_counter()
print(f"HF imports+tokenizer {t1-t0:.2f} load {t2-t1:.2f} translate {t3-t2:.2f} tokens {out.shape[1]}")
