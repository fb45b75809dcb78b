// Instantiation stub: the CUDA kernels of grid_pushgrad for every dtype (kernels.cuh holds them
// and the macro; docs/pushpull-spec.md). One file per op, so that nvcc builds them in parallel.
#include "pushpull/cuda/kernels.cuh"

NJ_PUSHPULL_LAUNCH(kPushGrad, PushGradOp, (1 << 1) | (1 << 3))
