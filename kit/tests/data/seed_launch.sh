# The seed's launch command (message 3511 of the Kimi-K2.5 EAGLE-3 session), verbatim.
NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS NCCL_MAX_NCHANNELS=16 NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512 \
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 \
/root/ml-env/bin/python3 -m sglang.launch_server \
  --model-path /shared/kimi-k2.5-int4 \
  --trust-remote-code \
  --tp-size 8 \
  --mem-fraction-static 0.85 \
  --host 0.0.0.0 --port 8000 \
  --num-continuous-decode-steps 4 \
  --disable-custom-all-reduce \
  --log-level info \
  --speculative-algorithm EAGLE \
  --speculative-draft-model-path /data/eagle3/output_10k_sglang/4 \
  --speculative-num-draft-tokens 5 \
  --speculative-eagle-topk 4 \
  --speculative-num-steps 3
