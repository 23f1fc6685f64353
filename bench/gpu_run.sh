#!/usr/bin/env bash
# The real-SGLang runs behind docs/results-h200.md, one step at a time on a GPU host with the repository checked out
# and SGLang importable (installed, or the offline bundle: BUNDLE=path/to/sglang-*.tar.xz installs it into $SITE).
#   bash bench/gpu_run.sh env      # install the bundle if BUNDLE is given, check imports, kit env + NCCL smoke
#                                  # (two GPUs: TP=2 launches too; `tp` runs only those)
#   bash bench/gpu_run.sh setup    # the embedded target converted; drafts from DRAFTS_FROM, else the demo draft trained here
#   bash bench/gpu_run.sh matrix   # the ground-truth matrix
#   bash bench/gpu_run.sh bench    # kit bench vs sglang.bench_serving (GPU 0) and CUDA graphs (GPU 1)
#   bash bench/gpu_run.sh clients  # kit bench vs sglang.bench_serving on a small random-weight Llama
#                                  # (bench_serving needs HF `datasets`: WHEELS=dir of wheels installs it)
#   bash bench/gpu_run.sh rh       # kit rehearse on every case side by side (RH_ONLY="seed llama" for some)
#   bash bench/gpu_run.sh table    # the request table (bench/serve_table.py) against one SGLang server, after setup
# Inputs: TOKENIZER (a tokenizer folder for the TP and client targets), WORK (default /tmp/w), SITE (default
# $WORK/site). Results: RESULTS/<step>/ and RESULTS/<step>.tgz (RESULTS defaults to $WORK/results).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
STEP=$1
W=${WORK:-/tmp/w}
SITE=${SITE:-$W/site}
RESULTS=${RESULTS:-$W/results}
R=$RESULTS/$STEP
mkdir -p "$W" "$R"
export KIT_CACHE_DIR=$W/cache PYTHONPATH=$SITE:$PWD
pack() { tar czf "$RESULTS/$STEP.tgz" -C "$RESULTS" "$STEP"; ls -la "$RESULTS/$STEP.tgz"; }
trap pack EXIT
install_bundle() {
  [ -n "${BUNDLE:-}" ] || return 0
  t0=$(date +%s)
  python3 -m kit.sglang.bundle install "$BUNDLE" --target "$SITE" 2>&1 | tail -2
  echo "install_s=$(($(date +%s) - t0))"
}
case $STEP in
env)
  install_bundle
  python3 -c "import sglang, sgl_kernel, transformers, torch; print('versions', sglang.__version__, transformers.__version__, torch.__version__, torch.cuda.device_count())" 2>&1 | tail -3
  nvidia-smi > "$R/nvidia-smi.txt"; nvidia-smi topo -m > "$R/topo.txt" 2>&1; cat "$R/topo.txt"
  timeout 400 python3 bench/gpu_two_gpus.py --tokenizer "$TOKENIZER" --work "$W" --out "$R" --launches 2>&1 | tail -5
  ;;
tp)
  install_bundle
  timeout 500 python3 bench/gpu_two_gpus.py --tokenizer "$TOKENIZER" --work "$W" --out "$R" --skip-env 2>&1 | tail -5
  ;;
setup)
  timeout 90 python3 bench/gpu_sglang.py setup ${DRAFTS_FROM:+--drafts-from "$DRAFTS_FROM"} --work "$W" 2>&1 | tail -1 | cut -c1-600
  if [ ! -f "$W/drafts/demo/config.json" ]; then
    t0=$(date +%s)
    timeout 420 python3 -m kit train-draft --threads 30 > "$R/train.log" 2>&1
    echo "train rc=$? s=$(($(date +%s) - t0))"; tail -4 "$R/train.log"
    D=$(ls -d "$KIT_CACHE_DIR"/drafts/eagle3-demo-* | head -1)
    mkdir -p "$W/drafts" && cp -r "$D" "$W/drafts/demo" && cp -r "$W/drafts/demo" "$R/draft"
    md5sum "$W/drafts/demo/model.safetensors"
  fi
  ;;
matrix)
  timeout 560 python3 bench/gpu_sglang.py matrix --work "$W" --out "$R/matrix" --gpus 0 1 2>&1 | grep -E "^\[gpu|^\{" | cut -c1-400
  ;;
bench)
  timeout 560 python3 bench/gpu_sglang.py bench --work "$W" --out "$R/bench" --gpu 0 --num-prompts 16 --repeats 1 > "$R/bench.txt" 2>&1 &
  timeout 560 python3 bench/gpu_sglang.py graphs --work "$W" --out "$R/graphs" --gpu 1 --num-prompts 16 --concurrency-list 1 8 > "$R/graphs.txt" 2>&1 &
  wait
  tail -c 1500 "$R/bench.txt"; tail -c 1500 "$R/graphs.txt"
  ;;
clients)
  install_bundle
  if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site2" "$WHEELS"/*.whl 2>&1 | tail -2
    export PYTHONPATH=$SITE:$W/site2:$PWD
  fi
  python3 -c "import datasets; print('datasets', datasets.__version__)" 2>&1 | tail -1
  python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; from gpu_two_gpus import build_target; build_target(Path('$TOKENIZER'), Path('$W/tp_target'))" 2>&1 | tail -1
  timeout 250 python3 bench/gpu_sglang.py bench --work "$W" --out "$R/bench" --gpu 0 --num-prompts 16 --repeats 1 --row baseline \
    --target "$W/tp_target" --server-extra=--cuda-graph-max-bs-decode=16 > "$R/bench.txt" 2>&1
  tail -c 800 "$R/bench.txt"
  ;;
rh)
  # kit rehearse over every case side by side (bench/gpu_rehearse.py): seed + fix at TP2 over both GPUs first, then
  # TP1 rehearsals --per-gpu at a time per GPU. RH_ONLY="seed seed-fix llama" limits the cases; RH_ARGS adds flags.
  install_bundle
  nvidia-smi --query-gpu=memory.used --format=csv > "$R/mem_before.txt"
  timeout 585 python3 bench/gpu_rehearse.py --work "$W/rh" --version 0.5.17 --bundle --deadline-s ${RH_DEADLINE:-500} \
    ${RH_ONLY:+--only $RH_ONLY} ${RH_ARGS:-} > "$R/rehearse.jsonl" 2> "$R/rehearse.err"
  echo "rehearse rc=$?"
  for d in "$W"/rh/*/rehearsal*/; do
    c=$(basename "$(dirname "$d")"); s=$(basename "$d"); s=${s#rehearsal}
    cp "$d/report.json" "$R/$c$s.report.json" 2>/dev/null; cp "${d%/}.log" "$R/$c$s.log" 2>/dev/null
    tail -c 20000 "$d/server.log" > "$R/$c$s.server.log" 2>/dev/null
  done
  nvidia-smi --query-gpu=memory.used --format=csv > "$R/mem_after.txt"
  python3 bench/rehearse_table.py "$R/rehearse.jsonl" --out "$R" | tail -1
  tail -c 1500 "$R/rehearse.err"
  ;;
table)
  install_bundle
  timeout 260 python3 bench/serve_table_sglang.py --work "$W" --out "$R" --timeout-s 200 2>&1 | tail -1 | cut -c1-1500
  python3 bench/serve_table.py --compare docs/results/cpu_serve_table_2026-12-04.json "$R/sglang_table.json" \
    --names kit-serve sglang --out "$R/compare.md" | head -3
  ;;
*)
  echo "gpu_run.sh: unknown step '$STEP' (env, tp, setup, matrix, bench, clients, rh, table)" >&2; exit 2
  ;;
esac
