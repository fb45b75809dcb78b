// Instantiation stub: the CUDA kernels of grid_grad_dot and affine_grad_dot for every dtype
// (kernels.cuh holds them and the macro; docs/pushpull-spec.md). One file per op, so that nvcc
// builds them in parallel.
#include "pushpull/cuda/kernels.cuh"

NJ_PUSHPULL_LAUNCH(kGradDot, GradDotOp, (1 << 1) | (1 << 3))
NJ_PUSHPULL_LAUNCH_AFFINE(kAffineDot, AffineDotOp, (1 << 1) | (1 << 3))
