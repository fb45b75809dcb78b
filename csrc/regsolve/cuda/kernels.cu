// Instantiation stub: regsolve's CUDA kernels (reg_matvec, reg_precond, one colour of
// reg_relax_), in a file of its own so that they compile without the torch headers, in parallel
// with ops.cu.
#include "regsolve/cuda/kernels.cuh"
