// kernels/permute.cu compiled as host C++ against the emulated CUDA runtime.
#include "../permute.cu"
