// kernels/moe_aux_loss.cu compiled as host C++ against the emulated CUDA runtime.
#include "../moe_aux_loss.cu"
