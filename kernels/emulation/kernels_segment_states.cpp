// kernels/segment_states.cu compiled as host C++ against the emulated CUDA runtime.
#include "../segment_states.cu"
