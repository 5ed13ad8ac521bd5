#!/usr/bin/env bash
# The wall time of a 2-process JAX job on 127.0.0.1 against one process, side by side (issue 29):
# whole `keras-transformer train` commands on the test fixture, interleaved, REPEATS times.
#   bash benchmarks/multi_process_job.sh [OUT_DIR] [REPEATS]
# Prints one line per command: which, repeat, seconds. Each process is bounded by `timeout`.
set -u
cd "$(dirname "$0")/.."
out=${1:-/tmp/multi-process-job}
repeats=${2:-3}
flags=(--corpus tests/fixtures/bible_es_en_small.tsv.gz --preset tiny --num-layers 1 --d-model 16 --num-heads 2
       --ff-dim 32 --max-length 24 --vocabulary-size 400 --batch-tokens 240 --warmup-steps 5 --dev-bleu-sentences 0
       --epochs 3 --steps-per-epoch 2)
free_port() { python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
rm -rf "$out" && mkdir -p "$out"
export KERAS_BACKEND=jax
for repeat in $(seq "$repeats"); do
    start=$(date +%s.%N)
    timeout 300 keras-transformer train "${flags[@]}" --output "$out/one-device-$repeat" > /dev/null 2>&1
    echo "one device, repeat $repeat: $(python -c "import time; print(round(time.time() - $start, 2))") s"
    start=$(date +%s.%N)
    XLA_FLAGS=--xla_force_host_platform_device_count=2 timeout 300 keras-transformer train "${flags[@]}" \
        --distribute data --output "$out/two-devices-$repeat" > /dev/null 2>&1
    echo "one process, 2 virtual devices, repeat $repeat: $(python -c "import time; print(round(time.time() - $start, 2))") s"
    port=$(free_port)
    start=$(date +%s.%N)
    for process_id in 0 1; do
        KERAS_DISTRIBUTION_JOB_ADDRESSES=127.0.0.1:$port KERAS_DISTRIBUTION_NUM_PROCESSES=2 \
        KERAS_DISTRIBUTION_PROCESS_ID=$process_id timeout 300 keras-transformer train "${flags[@]}" \
            --distribute data --output "$out/job-$repeat-$process_id" > "$out/job-$repeat-$process_id.log" 2>&1 &
    done
    wait
    echo "2 processes, repeat $repeat: $(python -c "import time; print(round(time.time() - $start, 2))") s"
done
