/* raypass runtime: integer matrix product of 8-bit operands (qnn.matmul; see
   passinfra/codegen/compute/quantize.py). Appended to conv_runtime.c: one runtime object,
   one compile, one instruction-set choice (raypass_conv_isa); it also compiles on its own.

   out[m, n] = sum over k of (A[m, k] - za[m]) * (B[k, n] - zb[n]) in int32, exactly: the
   wrapped int32 of the exact sum, as the reference (int64, then cast) computes it.

   Every body computes on an unsigned A' and a signed B' (u8 x s8, the operand types of
   VPDPBUSD): A' = A ^ 0x80 when A is int8 (A' = A + 128, so za' = za + 128), B' = B ^ 0x80
   when B is uint8 (B' = B - 128, zb' = zb - 128), and

     sum (A - za)(B - zb) = S - zb' * rowsum(A') - za' * colsum(B') + K * za' * zb'

   with S = sum A' * B'. Each term is an integer computed exactly modulo 2^32 (uint32
   arithmetic), so the result does not depend on the order of the sums: the AVX-512 VNNI,
   AVX2 and portable bodies and any thread count give the same bits. No step saturates:
   VPDPBUSD adds its four u8 x s8 products in 32 bits, and the AVX2 body widens to 16 bits
   and uses VPMADDWD (a pair of products of at most 255 * 128 each fits in int32), where
   onnxruntime's AVX2 kernel uses VPMADDUBSW, whose 16-bit pair sums can saturate. */
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

/* output columns per panel (COLUMNS in passinfra/ir/op/qgemm_panels.py): B' is read in
   panels of [Kp / 4][32 columns][4 k] signed bytes, stored so at compile time for a
   constant weight (qgemm_panels), else packed here, one panel at a time */
#define RP_QGEMM_COLUMNS 32
#define RP_QGEMM_PANEL(Kp) ((Kp) * RP_QGEMM_COLUMNS)

typedef struct {
  const uint8_t* A;        /* [1 + M, Kp]: a row of ones (its sums are the columns' sums of B'),
                              then A' (unsigned), zeros past K */
  const uint32_t* rowsum;  /* [1 + M] sum over k of each row of A' (entry 0 unused) */
  const uint8_t* B;        /* panels of B' (b_packed), or B [K, N] as given */
  const void* za;          /* A's zero point(s): one, or one per row (za_step 1) */
  const void* zb;          /* B's zero point(s): one, or one per column (zb_step 1) */
  int32_t* out;            /* [M, N] */
  int64_t M, N, K, Kp, za_step, zb_step;
  int a_signed, b_signed, b_packed, vnni;
} rp_qgemm;

static uint32_t rp_qgemm_za(const rp_qgemm* g, int64_t m) {
  const int64_t i = m * g->za_step;
  return g->a_signed ? (uint32_t)(((const int8_t*)g->za)[i] + 128) : ((const uint8_t*)g->za)[i];
}

static uint32_t rp_qgemm_zb(const rp_qgemm* g, int64_t n) {
  const int64_t i = n * g->zb_step;
  return g->b_signed ? (uint32_t)(int32_t)((const int8_t*)g->zb)[i]
                     : (uint32_t)((int32_t)((const uint8_t*)g->zb)[i] - 128);
}

/* out[m, n0 .. n0+cols) from its raw sums S and the columns' sums of B' */
static void rp_qgemm_finish(const rp_qgemm* g, int64_t m, int64_t n0, int64_t cols, const uint32_t* sums,
                            const uint32_t* colsum) {
  const uint32_t za = rp_qgemm_za(g, m), ra = g->rowsum[1 + m], k = (uint32_t)g->K;
  for (int64_t c = 0; c < cols; c++) {
    const uint32_t zb = rp_qgemm_zb(g, n0 + c);
    g->out[m * g->N + n0 + c] = (int32_t)(sums[c] - zb * ra - za * colsum[c] + k * za * zb);
  }
}

/* 32 bytes of row k of B' from column n0 on, zeros past N and K */
static void rp_qgemm_row(const rp_qgemm* g, int64_t k, int64_t n0, int64_t cols, uint8_t* row) {
  const uint8_t flip = g->b_signed ? 0 : 0x80;
  const uint8_t* src = g->B + k * g->N + n0;
  for (int64_t c = 0; c < RP_QGEMM_COLUMNS; c++) row[c] = k < g->K && c < cols ? (uint8_t)(src[c] ^ flip) : 0;
}

/* ----------------------------------------------------------------------------- packing */

/* the panel of columns n0 .. n0+cols of an unpacked B: rows k .. k+3 transposed 4 x 32 */
__attribute__((target("avx2")))
static void rp_qgemm_pack_avx2(const rp_qgemm* g, int64_t n0, int64_t cols, uint8_t* packed) {
  const __m256i flip = _mm256_set1_epi8(g->b_signed ? 0 : (char)0x80);
  uint8_t rows[4][RP_QGEMM_COLUMNS];
  for (int64_t k = 0; k < g->Kp; k += 4) {
    __m256i r[4];
    for (int j = 0; j < 4; j++) {
      if (cols == RP_QGEMM_COLUMNS && k + j < g->K) {
        r[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(g->B + (k + j) * g->N + n0)), flip);
      } else {
        rp_qgemm_row(g, k + j, n0, cols, rows[j]);
        r[j] = _mm256_loadu_si256((const __m256i*)rows[j]);
      }
    }
    /* columns 0-3 | 16-19 in u0, 4-7 | 20-23 in u1, 8-11 | 24-27 in u2, 12-15 | 28-31 in u3 */
    const __m256i t0 = _mm256_unpacklo_epi8(r[0], r[1]), t1 = _mm256_unpackhi_epi8(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi8(r[2], r[3]), t3 = _mm256_unpackhi_epi8(r[2], r[3]);
    const __m256i u0 = _mm256_unpacklo_epi16(t0, t2), u1 = _mm256_unpackhi_epi16(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi16(t1, t3), u3 = _mm256_unpackhi_epi16(t1, t3);
    __m256i* dst = (__m256i*)(packed + k * RP_QGEMM_COLUMNS);
    _mm256_storeu_si256(dst, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
}

static void rp_qgemm_pack_c(const rp_qgemm* g, int64_t n0, int64_t cols, uint8_t* packed) {
  uint8_t row[RP_QGEMM_COLUMNS];
  for (int64_t k = 0; k < g->Kp; k++) {
    rp_qgemm_row(g, k, n0, cols, row);
    for (int c = 0; c < RP_QGEMM_COLUMNS; c++) packed[(k / 4) * 128 + c * 4 + k % 4] = row[c];
  }
}

/* ----------------------------------------------------------------------------- AVX-512 VNNI */

/* ROWS rows of A' from row m over one panel: raw sums into sums[ROWS][32] */
#define RP_QGEMM_VNNI_TILE(ROWS)                                                                        \
  __attribute__((target("avx512f,avx512bw,avx512vnni")))                                             \
  static void rp_qgemm_tile_vnni_##ROWS(const rp_qgemm* g, int64_t m, const uint8_t* panel,           \
                                        uint32_t* sums) {                                              \
    __m512i acc[ROWS][2];                                                                              \
    _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512(); \
    for (int64_t k = 0; k < g->Kp; k += 4) {                                                           \
      const __m512i b0 = _mm512_loadu_si512(panel + k * RP_QGEMM_COLUMNS);                             \
      const __m512i b1 = _mm512_loadu_si512(panel + k * RP_QGEMM_COLUMNS + 64);                        \
      _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                         \
        int32_t quad;                                                                                  \
        memcpy(&quad, g->A + (m + r) * g->Kp + k, 4);                                                  \
        const __m512i a = _mm512_set1_epi32(quad);                                                     \
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, b0);                                             \
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, b1);                                             \
      }                                                                                                \
    }                                                                                                  \
    _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                           \
      _mm512_storeu_si512(sums + r * RP_QGEMM_COLUMNS, acc[r][0]);                                     \
      _mm512_storeu_si512(sums + r * RP_QGEMM_COLUMNS + 16, acc[r][1]);                                \
    }                                                                                                  \
  }
RP_QGEMM_VNNI_TILE(1)
RP_QGEMM_VNNI_TILE(2)
RP_QGEMM_VNNI_TILE(4)

/* ----------------------------------------------------------------------------- AVX2 */

/* ROWS rows over one panel, 16 columns at a time: 16 bytes of the panel (4 columns x 4 k)
   widen to 16 int16, VPMADDWD with the row's four k (as int16, repeated) gives each
   column's two pair sums in adjacent int32 lanes, added at the end */
#define RP_QGEMM_AVX2_TILE(ROWS)                                                                        \
  __attribute__((target("avx2")))                                                                      \
  static void rp_qgemm_tile_avx2_##ROWS(const rp_qgemm* g, int64_t m, const uint8_t* panel,           \
                                        uint32_t* sums) {                                              \
    for (int h = 0; h < 2; h++) {                                                                      \
      __m256i acc[ROWS][4];                                                                            \
      _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++)                                          \
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) acc[r][v] = _mm256_setzero_si256();        \
      for (int64_t k = 0; k < g->Kp; k += 4) {                                                         \
        const uint8_t* bk = panel + k * RP_QGEMM_COLUMNS + 64 * h;                                     \
        __m256i b[4];                                                                                  \
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                                            \
          b[v] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bk + 16 * v)));                \
        _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++) {                                       \
          const uint8_t* a4 = g->A + (m + r) * g->Kp + k;                                              \
          const __m256i a = _mm256_set1_epi64x((int64_t)((uint64_t)a4[0] | (uint64_t)a4[1] << 16 |     \
                                                         (uint64_t)a4[2] << 32 | (uint64_t)a4[3] << 48)); \
          _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                                          \
            acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(a, b[v]));                       \
        }                                                                                              \
      }                                                                                                \
      for (int r = 0; r < ROWS; r++) {                                                                 \
        uint32_t pairs[32];                                                                            \
        for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i*)(pairs + 8 * v), acc[r][v]);         \
        for (int c = 0; c < 16; c++) sums[r * RP_QGEMM_COLUMNS + 16 * h + c] = pairs[2 * c] + pairs[2 * c + 1]; \
      }                                                                                                \
    }                                                                                                  \
  }
RP_QGEMM_AVX2_TILE(1)
RP_QGEMM_AVX2_TILE(2)

/* ----------------------------------------------------------------------------- portable */

static void rp_qgemm_tile_c(const rp_qgemm* g, int64_t m, const uint8_t* panel, uint32_t* sums) {
  const uint8_t* a = g->A + m * g->Kp;
  memset(sums, 0, RP_QGEMM_COLUMNS * sizeof(uint32_t));
  for (int64_t k = 0; k < g->Kp; k += 4)
    for (int c = 0; c < RP_QGEMM_COLUMNS; c++)
      for (int j = 0; j < 4; j++)
        sums[c] += (uint32_t)a[k + j] * (uint32_t)(int32_t)(int8_t)panel[k * RP_QGEMM_COLUMNS + 4 * c + j];
}

/* ----------------------------------------------------------------------------- driver */

/* rows m .. m+rows of [ones; A'] over the panel: the body's widest tile that fits */
static int rp_qgemm_rows(const rp_qgemm* g, int body, int64_t m, int64_t left, const uint8_t* panel,
                         uint32_t* sums) {
  if (body == 2) {
    if (left >= 4) return rp_qgemm_tile_vnni_4(g, m, panel, sums), 4;
    if (left >= 2) return rp_qgemm_tile_vnni_2(g, m, panel, sums), 2;
    return rp_qgemm_tile_vnni_1(g, m, panel, sums), 1;
  }
  if (body == 1) {
    if (left >= 2) return rp_qgemm_tile_avx2_2(g, m, panel, sums), 2;
    return rp_qgemm_tile_avx2_1(g, m, panel, sums), 1;
  }
  return rp_qgemm_tile_c(g, m, panel, sums), 1;
}

static int rp_qgemm_panels(void* ctx, int64_t begin, int64_t end) {
  const rp_qgemm* g = (const rp_qgemm*)ctx;
  const int level = raypass_conv_isa(-1);  /* the level in effect (detected once) */
  const int body = level == 2 && g->vnni ? 2 : level >= 1 ? 1 : 0;
  uint8_t* packed = g->b_packed ? 0 : (uint8_t*)malloc((size_t)RP_QGEMM_PANEL(g->Kp));
  if (!g->b_packed && !packed) return -1;
  uint32_t sums[4 * RP_QGEMM_COLUMNS], colsum[RP_QGEMM_COLUMNS];
  for (int64_t t = begin; t < end; t++) {
    const int64_t n0 = t * RP_QGEMM_COLUMNS;
    const int64_t cols = g->N - n0 < RP_QGEMM_COLUMNS ? g->N - n0 : RP_QGEMM_COLUMNS;
    const uint8_t* panel = g->B + t * RP_QGEMM_PANEL(g->Kp);
    if (!g->b_packed) {
      if (level >= 1) rp_qgemm_pack_avx2(g, n0, cols, packed);
      else rp_qgemm_pack_c(g, n0, cols, packed);
      panel = packed;
    }
    for (int64_t m = 0; m <= g->M;) {  /* row 0: the ones */
      const int rows = rp_qgemm_rows(g, body, m, g->M + 1 - m, panel, sums);
      for (int r = 0; r < rows; r++) {
        if (m + r == 0) memcpy(colsum, sums, sizeof(colsum));
        else rp_qgemm_finish(g, m + r - 1, n0, cols, sums + r * RP_QGEMM_COLUMNS, colsum);
      }
      m += rows;
    }
  }
  free(packed);
  return 0;
}

/* A [M, K] int8 (a_signed 1) or uint8, row-major; B int8 (b_signed 1) or uint8: panels of
   B' (b_packed 1: passinfra/ir/op/qgemm_panels.py), or [K, N] row-major; za one value or
   one per row (za_step 0 or 1), zb one value or one per column (zb_step 0 or 1), of their
   operand's type; out [M, N] int32. Returns 0, or -1 when a buffer cannot be allocated. */
int rp_qgemm_i8(const void* A, const void* B, const void* za, const void* zb, int32_t* out, int64_t M,
                int64_t N, int64_t K, int64_t a_signed, int64_t b_signed, int64_t za_step, int64_t zb_step,
                int64_t b_packed) {
  if (M <= 0 || N <= 0) return 0;
  const int64_t Kp = (K + 3) / 4 * 4;
  uint8_t* Au = (uint8_t*)calloc((size_t)((M + 1) * Kp), 1);
  uint32_t* rowsum = (uint32_t*)malloc((size_t)(M + 1) * sizeof(uint32_t));
  if (!Au || !rowsum) {
    free(Au), free(rowsum);
    return -1;
  }
  memset(Au, 1, (size_t)K);
  const uint8_t flip = a_signed ? 0x80 : 0;
  for (int64_t m = 0; m < M; m++) {
    const uint8_t* src = (const uint8_t*)A + m * K;
    uint8_t* dst = Au + (m + 1) * Kp;
    uint32_t s = 0;
    for (int64_t k = 0; k < K; k++) s += dst[k] = (uint8_t)(src[k] ^ flip);
    rowsum[m + 1] = s;
  }
  __builtin_cpu_init();
  rp_qgemm g = {Au, rowsum, (const uint8_t*)B, za, zb, out, M, N, K, Kp, za_step, zb_step, (int)a_signed,
                (int)b_signed, (int)b_packed,
                __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")};
  const int64_t panels = (N + RP_QGEMM_COLUMNS - 1) / RP_QGEMM_COLUMNS;
  /* a panel is (M + 1) * K * 32 multiply-adds */
  int status = rp_parallel_for(rp_qgemm_panels, &g, panels, (M + 1) * K * RP_QGEMM_COLUMNS / RP_MACS_PER_WORK + 1);
  free(Au), free(rowsum);
  return status < 0 ? -1 : 0;
}
