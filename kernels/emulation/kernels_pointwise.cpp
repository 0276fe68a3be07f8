// kernels/pointwise.cu compiled as host C++ against the emulated CUDA runtime.
#include "../pointwise.cu"
