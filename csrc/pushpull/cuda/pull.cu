// The CUDA kernels of the ops below (launch.cuh holds the macros, kernels.cuh the kernels;
// docs/pushpull-spec.md). A kernel library (-DNJ_KERNEL_LIB) holds one op (-DNJ_KERNEL_<op>)
// for one dtype (-DNJ_KERNEL_DTYPE); the host emulation of the tests holds every one.
#include "pushpull/cuda/launch.cuh"

#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_grid_pull)
NJ_PUSHPULL_LAUNCH(kPull, PullOp, (1 << 0) | (1 << 1) | (1 << 3))
NJ_PUSHPULL_EXPORT(grid_pull, kPull)
#endif

#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_affine_pull)
NJ_PUSHPULL_LAUNCH_AFFINE(kAffinePull, AffinePullOp, (1 << 0) | (1 << 1) | (1 << 3))
NJ_PUSHPULL_EXPORT(affine_pull, kAffinePull)
#endif
