// kernels/gates.cu compiled as host C++ against the emulated CUDA runtime.
#include "../gates.cu"
