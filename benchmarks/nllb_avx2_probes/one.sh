#!/bin/bash
# one.sh CHECKOUT [extra flags]: one translate call, prints "wall_s rss_kb work_s"
co=$1; shift
cd /tmp/n6
out=$(PYTHONPATH=$co KERAS_TRANSFORMER_CACHE_DIR=/tmp/n6/cache KERAS_BACKEND=jax /usr/bin/time -f "TIME %e %M" /work/main/.venv/bin/python -m keras_transformer_cli --verbose translate --model /tmp/n6/run-aligned --beam 1 --max-new-tokens 32 --source-language spa_Latn --target-language eng_Latn "$@" "¿Dónde está el niño?" 2>&1)
echo "$(echo "$out" | grep TIME | cut -d' ' -f2-) $(echo "$out" | grep -o 'work [0-9.]*' | cut -d' ' -f2)"
