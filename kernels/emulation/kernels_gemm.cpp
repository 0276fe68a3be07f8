// kernels/gemm.cu compiled as host C++ against the emulated CUDA runtime.
#include "../gemm.cu"
