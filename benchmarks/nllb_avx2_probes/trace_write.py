"""Ad hoc: resident memory after each phase of writing an NLLB-sized program (quantize int8 or not)."""
import os, sys, time, gc, tempfile, pathlib
os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.environ.get("CHECKOUT", "/work/main"))
def rss(tag, t0=[time.perf_counter()]):
    st = {l.split()[0][:-1]: int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith(("VmRSS", "VmHWM"))}
    print(f"{time.perf_counter() - t0[0]:6.1f} s {tag:28s} rss {st['VmRSS']:6d} MB peak {st['VmHWM']:6d} MB", flush=True)
quantize = sys.argv[1] if len(sys.argv) > 1 else None
import keras, numpy as np
rss("keras imported")
from keras_transformer.translation.translator import Translator
from keras_transformer.model_file import load_model
model = load_model("/tmp/n6/run-aligned/model.keras", compile=False)
rss("model loaded")
if quantize:
    from keras_transformer.quantization import quantize as quantize_model
    quantize_model(model, quantize)
    rss("quantized")
    gc.collect(); rss("gc")
