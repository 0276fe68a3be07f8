// kernels/device_info.cu compiled as host C++ against the emulated CUDA runtime.
#include "../device_info.cu"
