#!/bin/bash
# Four rounds, fresh processes in turn: ours float32, ours int8, CTranslate2 float32 and int8, transformers.
cd /tmp/n6
for i in 1 2 3 4; do
  echo "ours-f32 $(ab/one.sh /work/main)"
  echo "ours-int8 $(ab/one.sh /work/main --quantize int8)"
  for m in ct2-f32 ct2-int8; do
    echo "$m $(/usr/bin/time -f 'TIME %e %M' /work/main/.venv/bin/python ct2_one.py nllb-600m-shape $m 2>&1 | grep -v Warn | tr '\n' ' ')"
  done
  echo "hf $(/usr/bin/time -f 'TIME %e %M' /work/main/.venv/bin/python hf_one.py nllb-600m-shape 2>&1 | grep 'HF\|TIME' | tr '\n' ' ')"
done
