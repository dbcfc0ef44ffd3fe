// cudasim shim: the CUDA header device_launch_parameters.h maps to the simulator (see ../cudasim.h).
#pragma once
#include "../cudasim.h"
