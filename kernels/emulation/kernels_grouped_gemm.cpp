// kernels/grouped_gemm.cu compiled as host C++ against the emulated CUDA runtime.
#include "../grouped_gemm.cu"
