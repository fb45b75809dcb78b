// splinc's CUDA kernel libraries (issue 31): the line kernels of lines/cuda.cuh, one launcher
// (filter or gather, -DNJ_KERNEL_<launcher>) and one dtype per library, with its plain-C entry
// nj_splinc_<launcher> (kernels.def lists them). No torch header.
#include "lines/cuda.cuh"

NJ_LINES_EXPORT(splinc)
