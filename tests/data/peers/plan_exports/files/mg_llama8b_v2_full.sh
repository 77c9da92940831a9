#!/bin/bash
# Megatron-LM (core_v0.15.3) arguments for the plan ppsched plan chose: TP 2 PP 4 DP 4 mbs 1 M 64 recompute full zero1, interleaved-1f1b --group-size 4 V=2
# predicted 11620.2 ms per step, 5640 tokens/s per GPU, MFU 29.4%, peak 11.78 GiB per GPU;
# M = global batch / (micro-batch size x DP) = 64 micro-batches per step.
# Source it in bash, then: torchrun ... pretrain_gpt.py "${MEGATRON_PLAN_ARGS[@]}" <your model, data and
# optimizer arguments> (an array: the layout's * and | stay one argument).
export CUDA_DEVICE_MAX_CONNECTIONS=1
MEGATRON_PLAN_ARGS=(
  --tensor-model-parallel-size 2
  --sequence-parallel
  --pipeline-model-parallel-size 4
  --num-layers 32
  --position-embedding-type rope
  --pipeline-model-parallel-layout 'Et*4|t*5|t*4|t*4|t*4|t*4|t*4|t*3L'
  --microbatch-group-size-per-virtual-pipeline-stage 4
  --micro-batch-size 1
  --global-batch-size 256
  --seq-length 8192
  --use-distributed-optimizer
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
)
