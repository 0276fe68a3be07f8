// kernels/attention_f32.cu compiled as host C++ against the emulated CUDA runtime.
#include "../attention_f32.cu"
