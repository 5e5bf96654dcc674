// One GEMM entry point for float and double over OpenBLAS's cblas (row-major).
#pragma once
// OpenBLAS's cblas.h, or the reference BLAS's, which Debian names cblas-netlib.h (cblas.h is an
// alternatives link that an unpacked package lacks).
#if __has_include(<cblas.h>)
#include <cblas.h>
#else
#include <cblas-netlib.h>
#endif

#include <cstdint>

namespace ringside::kernels::cpu {

/// C = alpha * op(A) op(B) + beta * C, row-major; op(X) is X or X^T. C is [m, n], op(A) [m, k],
/// op(B) [k, n]; lda/ldb/ldc are row strides in elements. Calls cblas_sgemm or cblas_dgemm.
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                 int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

/// Makes every OpenBLAS call run on the calling thread only. Ranks run concurrently as
/// threads, so a GEMM must not spawn its own pool (it would oversubscribe the cores).
void set_blas_single_threaded();

}  // namespace ringside::kernels::cpu
