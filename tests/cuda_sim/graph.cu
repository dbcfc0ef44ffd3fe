// Stream capture and CUDA graphs: work issued to a capturing stream is recorded, not run; each
// graph launch replays it in order; kernel arguments are the values at capture; device memory is
// read when the replay runs (how ingot's decode steps use graphs: new metadata each step, the
// same launches).
#include "common.h"

__global__ void add_scaled(int* acc, const int* step, int scale) { acc[threadIdx.x] += scale * step[0] + (int)threadIdx.x; }

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *acc, *step;
  CHECK(cudaMalloc(&acc, 32 * sizeof(int)));
  CHECK(cudaMalloc(&step, sizeof(int)));
  CHECK(cudaMemset(acc, 0, 32 * sizeof(int)));
  int host_step = 1, scale = 10;
  CHECK(cudaMemcpy(step, &host_step, sizeof(int), cudaMemcpyHostToDevice));

  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  add_scaled<<<1, 32, 0, s>>>(acc, step, scale);
  scale = 1000; // the captured launch keeps 10
  add_scaled<<<1, 32, 0, s>>>(acc, step, 1);
  CHECK(cudaStreamEndCapture(s, &graph));
  std::vector<int> h(32);
  CHECK(cudaMemcpy(h.data(), acc, 32 * sizeof(int), cudaMemcpyDeviceToHost));
  int recorded_not_run = 1;
  for (int i = 0; i < 32; i++) recorded_not_run &= h[i] == 0;

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<int> want(32, 0);
  for (int replay = 1; replay <= 3; replay++) {
    host_step = replay; // read by the replay from device memory
    CHECK(cudaMemcpyAsync(step, &host_step, sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < 32; i++) want[i] += 10 * replay + i + replay + i;
  }
  CHECK(cudaMemcpy(h.data(), acc, 32 * sizeof(int), cudaMemcpyDeviceToHost));
  if (!recorded_not_run) std::printf("MISMATCH: captured work ran during the capture\n"), g_failures++;
  expect_eq_int("graph replays", h.data(), want.data(), 32);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(acc));
  CHECK(cudaFree(step));
  std::printf("CHECKSUM %llx\n", checksum(h.data(), h.size() * sizeof(int)));
  return finish();
}
