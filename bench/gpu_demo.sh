#!/usr/bin/env bash
# The GPU-host side of `kit demo --gpu` and of the kit bench / sglang.bench_serving parity run, one step per
# device call: the 64 MiB transfer limit splits the bundle, the SmolLM2 GGUF and the draft over the first three
# calls (carried in stage/, kept in /root/stage while the machine stays warm).
#   bash bench/gpu_demo.sh s1      # install the bundle (stage/sglang-*.tar.xz) into /root/site; keep GGUF part 1
#   bash bench/gpu_demo.sh s2      # keep GGUF part 2
#   bash bench/gpu_demo.sh demo    # join the GGUF (md5 checked), then `kit demo --gpu` (draft: stage/draft if carried)
#   bash bench/gpu_demo.sh finish  # score a served run carried back as stage/demo_run.tgz (python -m kit.demo_gpu finish)
#   bash bench/gpu_demo.sh parity  # kit bench vs sglang.bench_serving on a no-speculation server, c=1 and 16, >= 60 s
# Results: $OUT/demo.log + demo_run.tgz, $OUT/parity.log + parity.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=/root/stage
OUT=${OUT:-/tmp/out_local}
mkdir -p "$S" "$OUT"
export KIT_CACHE_DIR=$S/cache KIT_SMOLLM2_GGUF=$S/SmolLM2-135M-Instruct.Q4_1.gguf PYTHONPATH=/root/site:$PWD
cp stage/gguf.part* "$S"/ 2>/dev/null
case $1 in
s1)
  t0=$(date +%s)
  python3 -m kit.sglang.bundle install stage/sglang-*.tar.xz --target /root/site 2>&1 | tail -2
  echo "install_s=$(($(date +%s) - t0))"
  # a bundle built before the stub answered IPython.version_info: write this kit's stub over it
  python3 -c "from pathlib import Path; from kit.sglang.bundle import IPYTHON_STUB as S; [Path('/root/site', k).write_text(v) for k, v in S.items()]"
  ;;
s2)
  ls -la "$S"
  ;;
demo)
  cat "$S"/gguf.part1 "$S"/gguf.part2 "$S"/gguf.part3 > "$KIT_SMOLLM2_GGUF"
  md5sum "$KIT_SMOLLM2_GGUF"
  D=""
  [ -f stage/draft/config.json ] && D="--draft $PWD/stage/draft"
  t0=$(date +%s)
  timeout 540 python3 -m kit demo --gpu --runs-dir "$S/runs" $D 2>&1 | grep -v -E "it/s\]|Loading weights" | tee "$OUT/demo.log"
  echo "demo_wall_s=$(($(date +%s) - t0))" | tee -a "$OUT/demo.log"
  tar czf "$OUT/demo_run.tgz" -C "$S/runs" .
  ;;
finish)
  # score a served run carried as stage/demo_run.tgz (the GGUF joined as in `demo`)
  cat "$S"/gguf.part1 "$S"/gguf.part2 "$S"/gguf.part3 > "$KIT_SMOLLM2_GGUF"
  mkdir -p "$S/runs" && tar xzf stage/demo_run.tgz -C "$S/runs"
  R=$(ls -d "$S"/runs/2* | tail -1)
  python3 -c "import kit.models as m; print(m.embedded_dir())" 2>&1 | tail -1
  timeout 200 python3 -m kit.demo_gpu finish "$R" 2>&1 | grep -v -E "it/s\]|Loading weights" | tee "$OUT/finish.log"
  tar czf "$OUT/demo_run.tgz" -C "$S/runs" .
  ;;
parity)
  timeout ${PARITY_TIMEOUT:-570} python3 bench/gpu_sglang.py bench --work "$S" --out "$S/parity" --gpu 0 --min-seconds 60 \
    --concurrency-list 1 16 2>&1 | grep -v -E "it/s\]|Loading weights" | tail -c 3000 | tee "$OUT/parity.log"
  tar czf "$OUT/parity.tgz" -C "$S" parity
  ;;
esac
