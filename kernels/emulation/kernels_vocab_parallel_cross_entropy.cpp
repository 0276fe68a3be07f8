// kernels/vocab_parallel_cross_entropy.cu compiled as host C++ against the emulated CUDA runtime.
#include "../vocab_parallel_cross_entropy.cu"
