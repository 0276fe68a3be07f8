// kernels/attention_backward.cu compiled as host C++ against the emulated CUDA runtime.
#include "../attention_backward.cu"
