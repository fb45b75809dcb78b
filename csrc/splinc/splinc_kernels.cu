// splinc on CUDA: the line kernels (filter; also the unused gather), torch-free.
#include "nitorch_jit/lines_cuda.cuh"
