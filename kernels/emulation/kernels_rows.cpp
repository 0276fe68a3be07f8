// kernels/rows.cu compiled as host C++ against the emulated CUDA runtime.
#include "../rows.cu"
