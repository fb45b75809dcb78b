// regsolve's CUDA kernel libraries (issue 31): the kernels of kernels.cuh, one op
// (-DNJ_KERNEL_reg_matvec, _reg_precond or _reg_relax_) and one dtype per library, with its
// plain-C entry nj_regsolve_<op> (kernels.def lists them). No torch header.
#include "core/host.h"
#include "regsolve/cuda/kernels.cuh"

#define NJ_REGSOLVE_EXPORT(NAME, FN)                                                         \
  extern "C" __attribute__((visibility("default"))) int nj_regsolve_##NAME(                 \
      const nj_host*, const void* call, char* err, int64_t err_len) {                       \
    const auto& c = *static_cast<const nitorch_jit::regsolve::cuda::KernelCall*>(call);     \
    return nitorch_jit::launch_error(                                                        \
        nitorch_jit::regsolve::cuda::FN(*c.params, c.dbl != 0, c.i32 != 0,                   \
                                        static_cast<cudaStream_t>(c.stream)),                \
        #NAME, err, err_len);                                                                \
  }

#if defined(NJ_KERNEL_reg_matvec)
NJ_REGSOLVE_EXPORT(reg_matvec, matvec)
#elif defined(NJ_KERNEL_reg_precond)
NJ_REGSOLVE_EXPORT(reg_precond, precond)
#elif defined(NJ_KERNEL_reg_relax_)
NJ_REGSOLVE_EXPORT(reg_relax_, relax)
#endif
