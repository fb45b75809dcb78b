// regsolve on CUDA: the kernels (reg_matvec, reg_precond, one colour of reg_relax_), torch-free.
#include "regsolve/cuda/kernels.cuh"
