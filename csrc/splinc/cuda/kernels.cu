// splinc on CUDA: the line kernels (filter; also the unused gather), torch-free.
#include "lines/cuda.cuh"
