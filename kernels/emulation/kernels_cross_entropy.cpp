// kernels/cross_entropy.cu compiled as host C++ against the emulated CUDA runtime.
#include "../cross_entropy.cu"
