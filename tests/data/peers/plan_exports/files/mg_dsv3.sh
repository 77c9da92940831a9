#!/bin/bash
# Megatron-LM (core_v0.15.3) arguments for the plan ppsched plan chose: TP 2 PP 8 DP 128 EP 64 mbs 1 M 32 recompute none zero1, 1f1b
# predicted 11828.8 ms per step, 693 tokens/s per GPU, MFU 18.3%, peak 75.35 GiB per GPU;
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
  --pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8|t*8|t*8|t*8|t*5mL'
  --micro-batch-size 1
  --global-batch-size 4096
  --seq-length 4096
  --use-distributed-optimizer
)
