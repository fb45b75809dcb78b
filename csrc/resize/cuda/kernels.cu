// resize on CUDA: the line kernels (gather; filter for the prefilter), torch-free.
#include "lines/cuda.cuh"
