#!/usr/bin/env bash
# The GPU-host side of the real-SGLang runs, one step per device call (the 64 MiB transfer limit splits the
# bundle, the SmolLM2 GGUF and the draft over three calls; /tmp persists while the machine stays warm).
#   bash bench/gpu_run.sh c1   # install the bundle, check imports, kit env + NCCL smoke (TP=2 launches: c1tp)
#   bash bench/gpu_run.sh c2   # second GGUF part
#   bash bench/gpu_run.sh c3   # last GGUF part (+ a carried draft); target conversion; else train the demo draft
#                              # there (kit train-draft) and send it back in 15 MiB parts
#   bash bench/gpu_run.sh c4m  # the ground-truth matrix
#   bash bench/gpu_run.sh c4   # kit bench vs sglang.bench_serving (GPU 0) and CUDA graphs (GPU 1)
#   bash bench/gpu_run.sh rh   # kit rehearse on every case side by side (RH_ONLY="seed llama" for some; SITE=bundle)
# Carried files live in .devcarry/<step>/ (ignored by git, named in the call's `carry`). Results: $OUT/<step>.tgz
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 KIT_CACHE_DIR=/tmp/w/cache
STEP=$1
W=/tmp/w
R=/tmp/out/$STEP
mkdir -p "$W" "$R"
OUT=${OUT:-/tmp/out_local}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD
pack() { tar czf "$OUT/$STEP.tgz" -C /tmp/out "$STEP"; ls -la "$OUT"; }
trap pack EXIT
cp .devcarry/"$STEP"/gguf.part* "$W"/ 2>/dev/null
case $STEP in
c1)
  t0=$(date +%s)
  python3 -m kit.sglang.bundle install .devcarry/c1/sglang-*.tar.xz --target /tmp/site 2>&1 | tail -2
  echo "install_s=$(($(date +%s) - t0))"
  python3 -c "import sglang, sgl_kernel, deep_gemm, transformers, torch; print('versions', sglang.__version__, transformers.__version__, torch.__version__, torch.cuda.device_count())" 2>&1 | tail -3
  nvidia-smi > "$R/nvidia-smi.txt"; nvidia-smi topo -m > "$R/topo.txt" 2>&1; cat "$R/topo.txt"
  timeout 400 python3 bench/gpu_two_gpus.py --tokenizer .devcarry/c1/tok --work $W --out "$R" --launches 2>&1 | tail -5
  ;;
c1tp)
  python3 -m kit.sglang.bundle install .devcarry/c1/sglang-*.tar.xz --target /tmp/site 2>&1 | tail -2
  timeout 500 python3 bench/gpu_two_gpus.py --tokenizer .devcarry/c1/tok --work $W --out "$R" --skip-env 2>&1 | tail -5
  ;;
c2)
  ls -la $W
  ;;
c3)
  timeout 90 python3 bench/gpu_sglang.py setup --carry .devcarry/c3 --work $W 2>&1 | tail -1 | cut -c1-600
  if [ ! -f $W/drafts/demo/config.json ]; then
    t0=$(date +%s)
    timeout 420 python3 -m kit train-draft --threads 30 > "$R/train.log" 2>&1
    echo "train rc=$? s=$(($(date +%s) - t0))"; tail -4 "$R/train.log"
    D=$(ls -d $KIT_CACHE_DIR/drafts/eagle3-demo-* | head -1)
    mkdir -p $W/drafts && cp -r "$D" $W/drafts/demo && cp $W/drafts/demo/*.json "$R"/
    split -b 15M -d $W/drafts/demo/model.safetensors "$OUT/draft.safetensors.part"
    md5sum $W/drafts/demo/model.safetensors
  fi
  ;;
c4m)
  timeout 560 python3 bench/gpu_sglang.py matrix --work $W --out "$R/matrix" --gpus 0 1 2>&1 | grep -E "^\[gpu|^\{" | cut -c1-400
  ;;
c4)
  timeout 560 python3 bench/gpu_sglang.py bench --work $W --out "$R/bench" --gpu 0 --num-prompts 16 > "$R/bench.txt" 2>&1 &
  timeout 560 python3 bench/gpu_sglang.py graphs --work $W --out "$R/graphs" --gpu 1 --num-prompts 16 --concurrency-list 1 8 > "$R/graphs.txt" 2>&1 &
  wait
  tail -c 1500 "$R/bench.txt"; tail -c 1500 "$R/graphs.txt"
  ;;
c6)
  # kit bench vs sglang.bench_serving on a small random-weight Llama (client comparison; CUDA graphs on);
  # bench_serving imports HF `datasets` at start: carried as wheels in .devcarry/c6
  python3 -m kit.sglang.bundle install .devcarry/c1/sglang-*.tar.xz --target /tmp/site 2>&1 | tail -1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .devcarry/c6/*.whl 2>&1 | tail -2
  export PYTHONPATH=/tmp/site:/tmp/site2:$PWD
  python3 -c "import datasets; print('datasets', datasets.__version__)" 2>&1 | tail -1
  python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; from gpu_two_gpus import build_target; build_target(Path('.devcarry/c1/tok'), Path('$W/tp_target'))" 2>&1 | tail -1
  timeout 250 python3 bench/gpu_sglang.py bench --work $W --out "$R/bench" --gpu 0 --num-prompts 16 --row baseline \
    --target $W/tp_target --server-extra=--cuda-graph-max-bs=16 > "$R/bench.txt" 2>&1
  tail -c 800 "$R/bench.txt"
  ;;
rh)
  # kit rehearse over every case side by side (bench/gpu_rehearse.py): seed + fix at TP2 over both GPUs first, then
  # TP1 rehearsals --per-gpu at a time per GPU; the bundle from $SITE, else /tmp/site or /root/site (installed here
  # from .devcarry/c1 when none has it). RH_ONLY="seed seed-fix llama" limits the cases; RH_ARGS adds flags.
  SITE=${SITE:-$(for d in /tmp/site /root/site; do [ -d "$d/sglang" ] && echo "$d" && break; done)}
  if [ -z "$SITE" ]; then
    SITE=/tmp/site
    python3 -m kit.sglang.bundle install .devcarry/c1/sglang-*.tar.xz --target $SITE 2>&1 | tail -2
  fi
  export PYTHONPATH=$SITE:$PWD
  nvidia-smi --query-gpu=memory.used --format=csv > "$R/mem_before.txt"
  timeout 585 python3 bench/gpu_rehearse.py --work $W/rh --version 0.5.17 --bundle --deadline-s ${RH_DEADLINE:-500} \
    ${RH_ONLY:+--only $RH_ONLY} ${RH_ARGS:-} > "$R/rehearse.jsonl" 2> "$R/rehearse.err"
  echo "rehearse rc=$?"
  for d in $W/rh/*/rehearsal*/; do
    c=$(basename "$(dirname "$d")"); s=$(basename "$d"); s=${s#rehearsal}
    cp "$d/report.json" "$R/$c$s.report.json" 2>/dev/null; cp "${d%/}.log" "$R/$c$s.log" 2>/dev/null
    tail -c 20000 "$d/server.log" > "$R/$c$s.server.log" 2>/dev/null
  done
  nvidia-smi --query-gpu=memory.used --format=csv > "$R/mem_after.txt"
  python3 bench/rehearse_table.py "$R/rehearse.jsonl" --out "$R" | tail -1
  tail -c 1500 "$R/rehearse.err"
  ;;
esac
