// cudasim shim: the CUDA header cuda_fp16.h maps to the simulator (see ../cudasim.h).
#pragma once
#include "../cudasim.h"
