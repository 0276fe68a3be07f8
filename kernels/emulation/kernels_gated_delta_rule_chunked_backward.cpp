// kernels/gated_delta_rule_chunked_backward.cu compiled as host C++ against the emulated CUDA runtime.
#include "../gated_delta_rule_chunked_backward.cu"
