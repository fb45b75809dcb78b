// resize on CUDA: the line kernels (gather; filter for the prefilter), torch-free.
#include "nitorch_jit/lines_cuda.cuh"
