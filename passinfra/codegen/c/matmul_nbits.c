/* raypass runtime: weight-only quantized matmul (see passinfra/codegen/compute/matmul_nbits.py).
   Appended to conv_runtime.c: one runtime object, one compile, one instruction-set choice
   (raypass_conv_isa); it also compiles on its own. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#if !defined(RP_MACS_PER_WORK)
#error "the tunables come from passinfra/codegen/conv_runtime.py (runtime_defines), or -D on the command line"
#endif

extern int raypass_conv_isa(int level);
typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

/* out[m, n] = sum over blocks b of scale[n, b] * sum over k in b of A[m, k] * (code[n, k] - zp[n, b])
   Codes are read as they are stored (4 bits: two per byte, low nibble first; 8 bits: one
   per byte) and never widened into a float copy of the weight.

   Order of the sums, fixed whatever the instruction set or the thread count: a block's
   products go to 16 lanes (lane l takes the products of one fixed set of k), the lanes are
   scaled and added to the row's 16 accumulators, and the accumulators are summed pairwise
   (8 + 8, 4 + 4, 2 + 2, 1 + 1) at the end. Every product is added by a fused multiply-add
   (one rounding): the vector bodies' FMA instructions, the portable body's fmaf (exact
   wherever it runs, in hardware or not), so every instruction set gives the same bits.
   Separate multiplies and adds cost the AVX-512 body a quarter of its time (one Zen 4
   core, 4 bits, 5632 x 2048: 0.94 ms against 0.73 with FMA). */

/* rows of A per pass over the output columns (a row of codes is read once for them) */
#define RP_NBITS_ROWS 4

typedef struct {
  const float* A;      /* [M, K] as given */
  const float* As;     /* [M, blocks * block]: A with each 32 k of a 4-bit block split into
                          its 16 even and 16 odd k (the codes' nibble order), zeros past K */
  const uint8_t* codes;
  const float* scales;
  const uint8_t* zp;
  float* out;
  int64_t M, N, K, block, bits, blocks, blob, ldas;
} rp_nbits;

/* The bodies below, one per instruction set, run lane for lane the same float
   operations on 16 lanes: AVX-512 as one vector, AVX2 as two halves, the portable body as
   an array. Codes minus the zero point are exact in int32 before the conversion to float.
   16 bytes of codes are, at 4 bits, the 16 even and the 16 odd k of a run of 32 (low
   nibbles with the even k first, then high nibbles with the odd k); at 8 bits, 16
   consecutive k. The first step of the pairwise sum over lanes (8 + 8) is the AVX2
   halves' sum, so the three give the same bits. */

/* the sum of `lanes` floats (a power of two), halves added until one is left: the order
   of every body's last steps */
static inline float rp_nbits_pairwise(float* s, int lanes) {
  for (int w = lanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) s[l] = s[l] + s[l + w];
  return s[0];
}

__attribute__((target("avx512f,fma"))) static inline __m512 rp_nbits_widen_avx512(__m128i codes, __m512i zero) {
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(codes), zero));
}

/* COLS columns n .. n+COLS-1 of rows m0 .. m0+rows-1: the columns' chains of additions
   interleaved (one column's chain is the latency of its additions; a row of A is read once
   for them), each column's operations in the order of one column alone. A 4-bit code
   minus its block's zero point is looked up (VPERMPS of the 16 values a block's codes
   stand for, by the code's nibble in each lane), where widening and converting each took
   three instructions (0.90 of the time) */
#define RP_NBITS_AVX512_COLUMNS(COLS)                                                                        \
  __attribute__((target("avx512f,fma")))                                                                     \
  static void rp_nbits_rows_avx512_##COLS(const rp_nbits* g, int64_t n, int64_t m0, int64_t rows) {          \
    const __m512i codes16 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);          \
    for (int64_t r = 0; r < rows; r++) {                                                                     \
      const float* a = g->As + (m0 + r) * g->ldas;                                                           \
      __m512 acc[COLS];                                                                                      \
      _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) acc[c] = _mm512_setzero_ps();                   \
      for (int64_t b = 0; b < g->blocks; b++) {                                                              \
        const float* ab = a + b * g->block;                                                                  \
        const uint8_t* blob[COLS];                                                                           \
        __m512i zero[COLS];                                                                                  \
        __m512 part[COLS];                                                                                   \
        _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) {                                             \
          blob[c] = g->codes + ((n + c) * g->blocks + b) * g->blob;                                          \
          zero[c] = _mm512_set1_epi32(g->zp[(n + c) * g->blocks + b]);                                       \
          part[c] = _mm512_setzero_ps();                                                                     \
        }                                                                                                    \
        if (g->bits == 4) {                                                                                  \
          __m512 level[COLS]; /* code - zero point of the codes 0 .. 15, as floats (exact) */                \
          _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++)                                             \
            level[c] = _mm512_cvtepi32_ps(_mm512_sub_epi32(codes16, zero[c]));                               \
          for (int64_t j = 0; j < g->blob; j += 16) {                                                        \
            const __m512 even = _mm512_loadu_ps(ab + 2 * j), odd = _mm512_loadu_ps(ab + 2 * j + 16);         \
            _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) {                                         \
              /* VPERMPS reads a lane's low 4 bits: the low nibble as it is, the high one shifted */          \
              const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(blob[c] + j)));    \
              part[c] = _mm512_fmadd_ps(even, _mm512_permutexvar_ps(bytes, level[c]), part[c]);              \
              part[c] = _mm512_fmadd_ps(odd, _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), level[c]),   \
                                        part[c]);                                                            \
            }                                                                                                \
          }                                                                                                  \
        } else {                                                                                             \
          for (int64_t j = 0; j < g->blob; j += 16) {                                                        \
            const __m512 x = _mm512_loadu_ps(ab + j);                                                        \
            _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) {                                         \
              const __m128i bytes = _mm_loadu_si128((const __m128i*)(blob[c] + j));                          \
              part[c] = _mm512_fmadd_ps(x, rp_nbits_widen_avx512(bytes, zero[c]), part[c]);                  \
            }                                                                                                \
          }                                                                                                  \
        }                                                                                                    \
        _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) {                                             \
          const __m512 scale = _mm512_set1_ps(g->scales[(n + c) * g->blocks + b]);                           \
          acc[c] = _mm512_fmadd_ps(part[c], scale, acc[c]);                                                  \
        }                                                                                                    \
      }                                                                                                      \
      _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) {                                               \
        float s[16];                                                                                         \
        _mm512_storeu_ps(s, acc[c]);                                                                         \
        g->out[(m0 + r) * g->N + n + c] = rp_nbits_pairwise(s, 16);                                          \
      }                                                                                                      \
    }                                                                                                        \
  }
RP_NBITS_AVX512_COLUMNS(1)
RP_NBITS_AVX512_COLUMNS(8)

__attribute__((target("avx2,fma"))) static inline __m256 rp_nbits_widen_avx2(__m128i codes, __m256i zero) {
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(codes), zero));
}

/* lanes 0-7 and 8-15 of 16 codes, times 16 floats from x, added to the halves of part */
#define RP_NBITS_AVX2_STEP(part, codes, x, zero)                                                   \
  part[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x), rp_nbits_widen_avx2(codes, zero), part[0]);           \
  part[1] = _mm256_fmadd_ps(_mm256_loadu_ps((x) + 8), rp_nbits_widen_avx2(_mm_srli_si128(codes, 8), zero), part[1])

/* COLS columns at a time, as the AVX-512 bodies (two: the halves take the registers) */
#define RP_NBITS_AVX2_COLUMNS(COLS)                                                                          \
  __attribute__((target("avx2,fma")))                                                                        \
  static void rp_nbits_rows_avx2_##COLS(const rp_nbits* g, int64_t n, int64_t m0, int64_t rows) {            \
    const __m128i nibble = _mm_set1_epi8(15);                                                                \
    for (int64_t r = 0; r < rows; r++) {                                                                     \
      const float* a = g->As + (m0 + r) * g->ldas;                                                           \
      __m256 acc[COLS][2];                                                                                   \
      _Pragma("GCC unroll 2") for (int c = 0; c < COLS; c++) acc[c][0] = acc[c][1] = _mm256_setzero_ps();    \
      for (int64_t b = 0; b < g->blocks; b++) {                                                              \
        const float* ab = a + b * g->block;                                                                  \
        const uint8_t* blob[COLS];                                                                           \
        __m256i zero[COLS];                                                                                  \
        __m256 part[COLS][2];                                                                                \
        _Pragma("GCC unroll 2") for (int c = 0; c < COLS; c++) {                                             \
          blob[c] = g->codes + ((n + c) * g->blocks + b) * g->blob;                                          \
          zero[c] = _mm256_set1_epi32(g->zp[(n + c) * g->blocks + b]);                                       \
          part[c][0] = part[c][1] = _mm256_setzero_ps();                                                     \
        }                                                                                                    \
        for (int64_t j = 0; j < g->blob; j += 16) {                                                          \
          _Pragma("GCC unroll 2") for (int c = 0; c < COLS; c++) {                                           \
            const __m128i bytes = _mm_loadu_si128((const __m128i*)(blob[c] + j));                            \
            if (g->bits == 4) {                                                                              \
              RP_NBITS_AVX2_STEP(part[c], _mm_and_si128(bytes, nibble), ab + 2 * j, zero[c]);                \
              const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);                          \
              RP_NBITS_AVX2_STEP(part[c], high, ab + 2 * j + 16, zero[c]);                                   \
            } else {                                                                                         \
              RP_NBITS_AVX2_STEP(part[c], bytes, ab + j, zero[c]);                                           \
            }                                                                                                \
          }                                                                                                  \
        }                                                                                                    \
        _Pragma("GCC unroll 2") for (int c = 0; c < COLS; c++) {                                             \
          const __m256 scale = _mm256_set1_ps(g->scales[(n + c) * g->blocks + b]);                           \
          acc[c][0] = _mm256_fmadd_ps(part[c][0], scale, acc[c][0]);                                         \
          acc[c][1] = _mm256_fmadd_ps(part[c][1], scale, acc[c][1]);                                         \
        }                                                                                                    \
      }                                                                                                      \
      _Pragma("GCC unroll 2") for (int c = 0; c < COLS; c++) {                                               \
        float s[8];                                                                                          \
        _mm256_storeu_ps(s, _mm256_add_ps(acc[c][0], acc[c][1]));                                            \
        g->out[(m0 + r) * g->N + n + c] = rp_nbits_pairwise(s, 8);                                           \
      }                                                                                                      \
    }                                                                                                        \
  }
RP_NBITS_AVX2_COLUMNS(1)
RP_NBITS_AVX2_COLUMNS(2)

/* The portable body: the 16 lanes as an array, each product added by fmaf (the vector
   bodies' fused multiply-add, rounded once; GCC inlines it where the target has FMA) */
static void rp_nbits_rows_c(const rp_nbits* g, int64_t n, int64_t m0, int64_t rows) {
  const uint8_t* row_codes = g->codes + n * g->blocks * g->blob;
  for (int64_t r = 0; r < rows; r++) {
    const float* a = g->As + (m0 + r) * g->ldas;
    float acc[16] = {0};
    for (int64_t b = 0; b < g->blocks; b++) {
      const uint8_t* blob = row_codes + b * g->blob;
      const int zero = g->zp[n * g->blocks + b];
      const float* ab = a + b * g->block;
      float part[16] = {0};
      for (int64_t j = 0; j < g->blob; j += 16) {
        if (g->bits == 4) {
          for (int l = 0; l < 16; l++) part[l] = fmaf(ab[2 * j + l], (float)((blob[j + l] & 15) - zero), part[l]);
          for (int l = 0; l < 16; l++) part[l] = fmaf(ab[2 * j + 16 + l], (float)((blob[j + l] >> 4) - zero), part[l]);
        } else {
          for (int l = 0; l < 16; l++) part[l] = fmaf(ab[j + l], (float)(blob[j + l] - zero), part[l]);
        }
      }
      const float scale = g->scales[n * g->blocks + b];
      for (int l = 0; l < 16; l++) acc[l] = fmaf(part[l], scale, acc[l]);
    }
    g->out[(m0 + r) * g->N + n] = rp_nbits_pairwise(acc, 16);
  }
}

static int rp_nbits_columns(void* ctx, int64_t begin, int64_t end) {
  const rp_nbits* g = (const rp_nbits*)ctx;
  const int level = raypass_conv_isa(-1);  /* the level in effect (detected once) */
  for (int64_t m0 = 0; m0 < g->M; m0 += RP_NBITS_ROWS) {
    const int64_t rows = g->M - m0 < RP_NBITS_ROWS ? g->M - m0 : RP_NBITS_ROWS;
    for (int64_t n = begin; n < end;) {
      if (level == 2 && end - n >= 8) {
        rp_nbits_rows_avx512_8(g, n, m0, rows), n += 8;
        continue;
      }
      if (level == 1 && end - n >= 2) {
        rp_nbits_rows_avx2_2(g, n, m0, rows), n += 2;
        continue;
      }
      if (level == 2) rp_nbits_rows_avx512_1(g, n, m0, rows);
      else if (level == 1) rp_nbits_rows_avx2_1(g, n, m0, rows);
      else rp_nbits_rows_c(g, n, m0, rows);
      n++;
    }
  }
  return 0;
}

/* A [M, K] float32, codes [N, blocks, blob], scales and zero points [N, blocks], out [M, N].
   A block's bytes are a multiple of 16: block is a multiple of 32 (4 bits) or 16 (8 bits). Returns 0, or -1 when the split
   copy of A cannot be allocated. */
int rp_matmul_nbits_f32(const float* A, const uint8_t* codes, const float* scales, const uint8_t* zp,
                        float* out, int64_t M, int64_t N, int64_t K, int64_t block, int64_t bits) {
  const int64_t blocks = (K + block - 1) / block, ldas = blocks * block;
  float* As = (float*)malloc((size_t)(M * ldas) * sizeof(float));
  if (!As) return -1;
  for (int64_t m = 0; m < M; m++) {
    float* dst = As + m * ldas;
    const float* src = A + m * K;
    for (int64_t i = 0; i < ldas; i++) {
      /* 4 bits: each run of 32 k holds its even k, then its odd k (ldas is a multiple of 32) */
      const int64_t k = bits == 4 ? i - i % 32 + 2 * (i % 16) + (i % 32) / 16 : i;
      dst[i] = k < K ? src[k] : 0.0f;
    }
  }
  rp_nbits g = {A, As, codes, scales, zp, out, M, N, K, block, bits, blocks, block * bits / 8, ldas};
  /* a column is M * K multiply-adds */
  rp_parallel_for(rp_nbits_columns, &g, N, M * K / RP_MACS_PER_WORK + 1);
  free(As);
  return 0;
}
