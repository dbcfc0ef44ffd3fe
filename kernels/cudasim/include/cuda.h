// cudasim shim: the CUDA header cuda.h maps to the simulator (see ../cudasim.h).
#pragma once
#include "../cudasim.h"
