#include "ggml-ext/ops/k_quant_kernel.h"

#include "ggml-ext/ops/k_cells_totals.h"

#include "ggml-cpu.h"

namespace ggml_ext {

std::vector<KQuantKernel> kquant_kernels_available() {
    std::vector<KQuantKernel> kernels{KQuantKernel::Scalar};
#if defined(LLAMA_TP_KCELLS_AVX2)
    if (ggml_cpu_has_avx2() && ggml_cpu_has_fma() && ggml_cpu_has_f16c()) kernels.push_back(KQuantKernel::Avx2);
#endif
#if defined(LLAMA_TP_KCELLS_AVX512)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
        kernels.push_back(KQuantKernel::Avx512);
    }
#endif
    return kernels;
}

KQuantKernel kquant_best_kernel() {
    static const KQuantKernel best = kquant_kernels_available().back();
    return best;
}

const char * kquant_kernel_name(KQuantKernel kernel) {
    switch (kernel) {
        case KQuantKernel::Scalar:
            return "scalar";
        case KQuantKernel::Avx2:
            return "avx2";
        case KQuantKernel::Avx512:
            return "avx512";
    }
    return "?";
}

bool kquant_panels_available() {
#if defined(LLAMA_TP_KCELLS_PANELS)
    static const bool available = kquant_best_kernel() == KQuantKernel::Avx512 && __builtin_cpu_supports("avx512vnni");
    return available;
#else
    return false;
#endif
}

int kquant_tile_tokens(KQuantKernel kernel) {
    // 256-bit paths have 16 registers for the accumulators: four tokens.
    return kernel == KQuantKernel::Avx512 ? kKQuantTileTokens : 4;
}

bool kquant_kernel_beats_ggml(KQuantKernel kernel) {
    return kernel == KQuantKernel::Avx512;
}

}  // namespace ggml_ext
