// kernels/moe_dispatch.cu compiled as host C++ against the emulated CUDA runtime.
#include "../moe_dispatch.cu"
