// Instantiation stub: resize's CUDA line kernels (the gather; the filter for the prefilter), in
// a file of its own so that it compiles without the torch headers, in parallel with ops.cu.
#include "lines/cuda.cuh"
