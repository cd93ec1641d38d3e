#pragma once
// Measures how fast this machine streams memory into the cores: the ceiling
// for decode speed, which reads every weight once per token.

namespace llama_tp {

// Bytes per second reading a buffer much larger than the caches with
// n_threads threads; the best of a few passes.
double measure_read_bandwidth(int n_threads);

}  // namespace llama_tp
