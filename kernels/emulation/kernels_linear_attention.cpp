// kernels/linear_attention.cu compiled as host C++ against the emulated CUDA runtime.
#include "../linear_attention.cu"
