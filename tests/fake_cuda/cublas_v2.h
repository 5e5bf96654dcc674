// A fake cuBLAS for tests/fake_cuda: cublasSgemm as the column-major product cuBLAS defines
// (through the CPU's cblas, CblasColMajor), queued on the handle's stream, so the CUDA
// backend's row-major-to-column-major operand mapping is checked on machines without a GPU.
#pragma once
#include "cuda_runtime_api.h"
#include "kernels/cpu/blas.h"

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };
enum libraryPropertyType { MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 };
struct cublasContext {
  cudaStream_t stream = nullptr;
};
typedef cublasContext* cublasHandle_t;

inline const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "invalid value"; }
inline cublasStatus_t cublasGetProperty(libraryPropertyType t, int* v) {
  *v = t == MAJOR_VERSION ? 13 : 0;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, as cuBLAS documents it; the
// leading dimensions are checked as cuBLAS checks them.
inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m) return CUBLAS_STATUS_INVALID_VALUE;
  if (!fake_cuda::on_device(A) || !fake_cuda::on_device(B) || !fake_cuda::on_device(C)) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *alpha, be = *beta;  // host pointer mode: read at the call
  fake_cuda::enqueue(h->stream, [=] {
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                m, n, k, al, A, lda, B, ldb, be, C, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}
