#!/bin/bash
# Megatron-LM (core_v0.15.3) arguments for the plan ppsched plan chose: TP 8 PP 4 DP 8 mbs 1 M 64 recompute none zero1, interleaved-1f1b --group-size 4 V=2
# predicted 20982.6 ms per step, 781 tokens/s per GPU, MFU 35.5%, peak 44.68 GiB per GPU;
# M = global batch / (micro-batch size x DP) = 64 micro-batches per step.
# Source it in bash, then: torchrun ... pretrain_gpt.py "${MEGATRON_PLAN_ARGS[@]}" <your model, data and
# optimizer arguments> (an array: the layout's * and | stay one argument).
export CUDA_DEVICE_MAX_CONNECTIONS=1
MEGATRON_PLAN_ARGS=(
  --tensor-model-parallel-size 8
  --sequence-parallel
  --pipeline-model-parallel-size 4
  --num-layers 80
  --position-embedding-type rope
  --pipeline-model-parallel-layout 'Et*10|t*10|t*10|t*10|t*10|t*11|t*10|t*9L'
  --microbatch-group-size-per-virtual-pipeline-stage 4
  --micro-batch-size 1
  --global-batch-size 512
  --seq-length 8192
  --use-distributed-optimizer
)
