// Instantiation stub: splinc's CUDA line kernels (the filter; also the unused gather), in a
// file of its own so that it compiles without the torch headers, in parallel with ops.cu.
#include "lines/cuda.cuh"
