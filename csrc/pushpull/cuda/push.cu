// Instantiation stub: the CUDA kernels of grid_push and affine_push for every dtype (kernels.cuh
// holds them and the macro; docs/pushpull-spec.md). One file per op, so that nvcc builds them in
// parallel.
#include "pushpull/cuda/kernels.cuh"

NJ_PUSHPULL_LAUNCH(kPush, PushOp, (1 << 0) | (1 << 1) | (1 << 3))
NJ_PUSHPULL_LAUNCH_AFFINE(kAffinePush, AffinePushOp, (1 << 1) | (1 << 3))
