#!/bin/bash
# Megatron-LM (core_v0.15.3) arguments for the plan ppsched plan chose: TP 2 PP 2 DP 8 mbs 1 M 32 recompute none zero1, 1f1b
# predicted 8310.0 ms per step, 7886 tokens/s per GPU, MFU 41.0%, peak 32.91 GiB per GPU;
# M = global batch / (micro-batch size x DP) = 32 micro-batches per step.
# Source it in bash, then: torchrun ... pretrain_gpt.py "${MEGATRON_PLAN_ARGS[@]}" <your model, data and
# optimizer arguments> (an array: the layout's * and | stay one argument).
export CUDA_DEVICE_MAX_CONNECTIONS=1
MEGATRON_PLAN_ARGS=(
  --tensor-model-parallel-size 2
  --sequence-parallel
  --pipeline-model-parallel-size 2
  --num-layers 32
  --position-embedding-type rope
  --pipeline-model-parallel-layout 'Et*17|t*15L'
  --micro-batch-size 1
  --global-batch-size 256
  --seq-length 8192
  --use-distributed-optimizer
)
