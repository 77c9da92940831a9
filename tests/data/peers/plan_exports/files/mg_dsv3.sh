#!/bin/bash
# Megatron-LM (core_v0.15.3) arguments for the plan ppsched plan chose: TP 2 PP 8 DP 128 EP 64 mbs 1 M 32 recompute full zero1, interleaved-1f1b --group-size 8 V=2
# predicted 12804.8 ms per step, 640 tokens/s per GPU, MFU 16.9%, peak 21.98 GiB per GPU;
# M = global batch / (micro-batch size x DP) = 32 micro-batches per step.
# Source it in bash, then: torchrun ... pretrain_gpt.py "${MEGATRON_PLAN_ARGS[@]}" <your model, data and
# optimizer arguments> (an array: the layout's * and | stay one argument).
export CUDA_DEVICE_MAX_CONNECTIONS=1
MEGATRON_PLAN_ARGS=(
  --tensor-model-parallel-size 2
  --sequence-parallel
  --pipeline-model-parallel-size 8
  --expert-model-parallel-size 64
  --num-layers 61
  --position-embedding-type rope
  --mtp-num-layers 1
  --pipeline-model-parallel-layout 'Et*5|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*3|tmL'
  --microbatch-group-size-per-virtual-pipeline-stage 8
  --micro-batch-size 1
  --global-batch-size 4096
  --seq-length 4096
  --use-distributed-optimizer
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
)
