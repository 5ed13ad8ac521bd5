#!/bin/bash
# first.sh CHECKOUT [flags]: a first call (fresh cache): wall s, peak KB, phases
co=$1; shift
rm -rf /tmp/n6/cache-first
out=$(cd /tmp/n6 && PYTHONPATH=$co KERAS_TRANSFORMER_CACHE_DIR=/tmp/n6/cache-first KERAS_BACKEND=jax /usr/bin/time -f "TIME %e %M" /work/main/.venv/bin/python -m keras_transformer_cli --verbose translate --model /tmp/n6/run-aligned --beam 1 --max-new-tokens 32 --source-language spa_Latn --target-language eng_Latn "$@" "¿Dónde está el niño?" 2>&1)
echo "$(echo "$out" | grep TIME | cut -d' ' -f2-) | $(echo "$out" | grep -o 'time: .*')"
