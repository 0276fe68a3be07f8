// kernels/attention_forward.cu compiled as host C++ against the emulated CUDA runtime.
#include "../attention_forward.cu"
