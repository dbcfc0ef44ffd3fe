// cudasim shim: the data-type enum of CUDA's library_types.h (the values of the real header), for
// the libraries cudasim stands in for (cublasLt.h).
#pragma once

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
